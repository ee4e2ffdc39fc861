package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

// TestAdmitReclaimsExpiredGuards: a holder that never released (a
// crashed worker) keeps its concurrency slot until its guard expires;
// the next admission that would be refused gives the slot back (what
// Valkey's quota_reconciler does by recounting), and a late release of
// the reclaimed guard gives nothing back twice.
func TestAdmitReclaimsExpiredGuards(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	q := model.NewUUID()
	if _, err := c.CreateQuota(ctx, &postgres.CreateQuotaPolicyParams{QuotaID: q, WindowSeconds: 60, MaxConcurrent: 1}); err != nil {
		t.Fatal(err)
	}
	e1, e2 := c.Partitions().NewSoloExecutionID("q"), c.Partitions().NewSoloExecutionID("q")
	now := time.Now().UnixMilli()
	admit := func(id model.ExecutionID, at int64, want string) {
		t.Helper()
		r, err := c.Admit(ctx, &postgres.AdmitParams{QuotaID: q, ExecutionID: id, NowMs: at})
		if err != nil || r.Status != want {
			t.Fatalf("admit %s at +%d ms: %+v %v, want %s", id, at-now, r, err, want)
		}
	}
	concurrent := func(want int64) {
		t.Helper()
		if st, err := c.ReadQuota(ctx, &postgres.ReadQuotaParams{QuotaID: q, NowMs: now}); err != nil || st.Concurrent != want {
			t.Fatalf("quota %+v %v, want %d held", st, err, want)
		}
	}
	release := func(id model.ExecutionID) {
		t.Helper()
		if err := c.ReleaseAdmission(ctx, &postgres.ReleaseAdmissionParams{QuotaID: q, ExecutionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	admit(e1, now, backend.AdmissionAdmitted)
	admit(e2, now+59_999, backend.AdmissionConcurrencyExceeded)
	admit(e2, now+60_000, backend.AdmissionAdmitted) // e1's guard expired
	concurrent(1)
	release(e1) // its guard was reclaimed: nothing to give back
	concurrent(1)
	release(e2)
	concurrent(0)
	release(e2)
	concurrent(0)
}

// TestRecordSpendRows: a spend attributed to an execution writes the
// per-execution ledger (ff_budget_usage_by_exec, the execution's uuid)
// and a dedup row that expires after 24 h; a refused report writes no
// usage, ledger or dedup row.
func TestRecordSpendRows(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	b := model.NewUUID()
	if _, err := c.CreateBudget(ctx, &postgres.CreateBudgetParams{BudgetID: b,
		Dimensions: []backend.BudgetDimension{{Name: "tokens", Hard: 10}}}); err != nil {
		t.Fatal(err)
	}
	id := c.Partitions().NewSoloExecutionID("spend")
	const now = int64(1_700_000_000_000)
	for _, delta := range []int64{4, 5, 2} {
		if _, err := c.RecordSpend(ctx, &postgres.ReportUsageParams{BudgetID: b, ExecutionID: id, NowMs: now,
			DedupID: "k" + string(rune('0'+delta)), Deltas: []backend.UsageDelta{{Dimension: "tokens", Delta: delta}}}); err != nil {
			t.Fatal(err)
		}
	}
	row := func(sql string, args ...any) (n int64) {
		t.Helper()
		if err := c.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	if n := row(`SELECT delta_total FROM ff_budget_usage_by_exec WHERE budget_id = $1 AND execution_id = $2::uuid
   AND dimensions_key = 'tokens'`, b.String(), id.UUIDString()); n != 9 {
		t.Fatalf("ledger %d, want 9 (the refused 2 not recorded)", n)
	}
	if n := row(`SELECT current_value FROM ff_budget_usage WHERE budget_id = $1 AND dimensions_key = 'tokens'`, b.String()); n != 9 {
		t.Fatalf("usage %d, want 9", n)
	}
	if n := row(`SELECT count(*) FROM ff_budget_usage_dedup WHERE expires_at_ms = $1`, now+86_400_000); n != 2 {
		t.Fatalf("%d dedup rows expiring in 24 h, want 2 (none for the refused report)", n)
	}
}
