package pgsuite_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/sdk"
)

// TestSDKBudgetResetPlugin: the pg_budget_reset plugin resets a budget
// the SDK created and spent on: usage zeroed, the last breach cleared
// (breach counts kept) and the next reset one ResetEvery after the
// plugin's now; the budget takes usage again after. The plugin reads the
// SDK's policy_json.reset_interval_ms and next_reset_at_ms.
func TestSDKBudgetResetPlugin(t *testing.T) {
	t.Parallel()
	pc := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	budget, err := client.CreateBudget(ctx, sdk.Budget{ResetEvery: time.Minute,
		Limits: map[string]sdk.BudgetLimit{"tokens": {Hard: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "spend", Kind: "llm"}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "spend", Lanes: []string{"spend"}, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(ctx) })
	claim := func() *sdk.Lease {
		var l *sdk.Lease
		pgtest.Eventually(t, time.Minute, "claim", func() bool {
			if l, err = w.ClaimNext(ctx); err != nil {
				t.Fatal(err)
			}
			return l != nil
		})
		return l
	}
	l := claim()
	if r, err := l.ReportUsage(ctx, budget, map[string]int64{"tokens": 90}, ""); err != nil || r.Exceeded {
		t.Fatalf("spend: %+v %v", r, err)
	}
	if r, err := l.ReportUsage(ctx, budget, map[string]int64{"tokens": 20}, ""); err != nil || !r.Exceeded {
		t.Fatalf("over the hard limit: %+v %v", r, err)
	}
	before, err := client.BudgetUsage(ctx, budget)
	if err != nil || before.Used["tokens"] != 90 {
		t.Fatalf("before the reset: %+v %v", before, err)
	}
	if err := l.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}

	// The plugins' clock runs an hour ahead: the reset is due at once.
	h, _, stop := startHost(t, pc, map[string]host.PluginConfig{"pg_budget_reset": {Interval: 100 * time.Millisecond}})
	<-h.Started()
	pgtest.Eventually(t, time.Minute, "budget reset", func() bool {
		u, err := client.BudgetUsage(ctx, budget)
		return err == nil && u.Used["tokens"] == 0
	})
	stop()
	after, err := client.BudgetUsage(ctx, budget)
	if err != nil {
		t.Fatal(err)
	}
	if !after.NextReset.After(before.NextReset.Add(ahead - time.Minute)) {
		t.Fatalf("next reset %v, want one minute after the plugins' now (about %v)", after.NextReset, before.NextReset.Add(ahead))
	}
	if n := count(t, pc, `SELECT count(*) FROM ff_budget_policy WHERE budget_id = $1 AND last_breach_at_ms IS NULL
   AND last_breach_dim IS NULL AND breach_count = 1`, budget.String()); n != 1 {
		t.Fatal("the reset kept the last breach or lost the breach count")
	}
	l = claim()
	if r, err := l.ReportUsage(ctx, budget, map[string]int64{"tokens": 100}, ""); err != nil || r.Exceeded {
		t.Fatalf("spend after the reset: %+v %v", r, err)
	}
	if u, err := client.BudgetUsage(ctx, budget); err != nil || u.Used["tokens"] != 100 {
		t.Fatalf("after the reset and a spend: %+v %v", u, err)
	}
	if err := l.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
}
