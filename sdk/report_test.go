package sdk_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestReportProgressAndUsage: a leased job records progress on its
// execution and reports budget usage: under the soft limit, past it,
// a repeated key, and a report that would pass the hard limit (refused,
// nothing added).
func TestReportProgressAndUsage(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	budget := model.NewUUID()
	if _, err := b.vc.CreateBudget(b.ctx, &valkey.CreateBudgetParams{BudgetID: budget, ScopeType: "tenant", ScopeID: "acme",
		EnforcementMode: "strict", OnHardLimit: "fail", OnSoftLimit: "warn", NowMs: time.Now().UnixMilli(),
		Dimensions: []valkey.BudgetDimension{{Name: "tokens", Hard: 1000, Soft: 500}}}); err != nil {
		t.Fatal(err)
	}
	id := b.create(t, sdk.ExecutionSpec{Lane: "llm", Kind: "summarize"})
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"llm"}})
	var l *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool { l = b.claim(t, w); return l != nil })

	if err := l.ReportProgress(b.ctx, 42.5, "chunk 17 of 40"); err != nil {
		t.Fatal(err)
	}
	if s := b.state(t, id); s.Fields["progress_pct"] != "42.5" || s.Fields["progress_message"] != "chunk 17 of 40" || s.Fields["progress_updated_at"] == "" {
		t.Fatalf("progress fields = %v", s.Fields)
	}
	for _, bad := range []float64{-1, 100.5} {
		if err := l.ReportProgress(b.ctx, bad, ""); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("progress %v: %v", bad, err)
		}
	}

	steps := []struct {
		n    int64
		key  string
		want sdk.UsageReport
	}{
		{400, "step-1", sdk.UsageReport{}},
		{200, "step-2", sdk.UsageReport{SoftBreach: true}},
		{200, "step-2", sdk.UsageReport{Duplicate: true}},
		{500, "step-3", sdk.UsageReport{Exceeded: true}},
	}
	for i, s := range steps {
		r, err := l.ReportUsage(b.ctx, budget, map[string]int64{"tokens": s.n}, s.key)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if r.Exceeded != s.want.Exceeded || r.SoftBreach != s.want.SoftBreach || r.Duplicate != s.want.Duplicate {
			t.Fatalf("step %d: report %+v, want %+v", i, r, s.want)
		}
	}
	raw := b.vc.Raw()
	k := model.BudgetKeysFor(b.vc.Partitions().BudgetPartition(budget), budget)
	used, err := raw.Do(b.ctx, raw.B().Hget().Key(k.Usage()).Field("tokens").Build()).ToString()
	if err != nil || used != strconv.Itoa(600) {
		t.Fatalf("usage = %q, %v; want 600 (the duplicate and the refused report add nothing)", used, err)
	}
	for name, u := range map[string]map[string]int64{"Empty": {}, "EmptyDimension": {"": 1}, "Negative": {"tokens": -1}} {
		if _, err := l.ReportUsage(b.ctx, budget, u, ""); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := l.Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	// The lease is gone: a late progress report is refused by the server.
	if err := l.ReportProgress(b.ctx, 100, "done"); err == nil {
		t.Fatal("progress after the lease ended was accepted")
	}
}
