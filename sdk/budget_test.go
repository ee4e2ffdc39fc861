package sdk_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestBudgetUsage: a budget created through the SDK takes reported usage
// and reads back its totals and limits.
func TestBudgetUsage(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	budget, err := b.c.CreateBudget(b.ctx, sdk.Budget{ScopeType: "tenant", ScopeID: "acme", ResetEvery: time.Hour,
		Limits: map[string]sdk.BudgetLimit{"tokens": {Hard: 1000, Soft: 500}, "usd_micros": {Hard: 90}}})
	if err != nil {
		t.Fatal(err)
	}
	u, err := b.c.BudgetUsage(b.ctx, budget)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Used) != 0 || u.Limits["tokens"] != (sdk.BudgetLimit{Hard: 1000, Soft: 500}) ||
		u.Limits["usd_micros"] != (sdk.BudgetLimit{Hard: 90}) || u.NextReset.IsZero() {
		t.Fatalf("fresh budget = %+v", u)
	}
	b.create(t, sdk.ExecutionSpec{Lane: "llm", Kind: "summarize"})
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"llm"}})
	var l *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool { l = b.claim(t, w); return l != nil })
	if r, err := l.ReportUsage(b.ctx, budget, map[string]int64{"tokens": 600, "usd_micros": 40}, "step-1"); err != nil || !r.SoftBreach {
		t.Fatalf("first report = %+v %v", r, err)
	}
	if r, err := l.ReportUsage(b.ctx, budget, map[string]int64{"tokens": 10, "usd_micros": 60}, "step-2"); err != nil || !r.Exceeded || r.Dimension != "usd_micros" {
		t.Fatalf("second report = %+v %v", r, err)
	}
	u, err = b.c.BudgetUsage(b.ctx, budget)
	if err != nil {
		t.Fatal(err)
	}
	if u.Used["tokens"] != 600 || u.Used["usd_micros"] != 40 {
		t.Fatalf("usage = %v, want tokens 600 and usd_micros 40 (the refused report adds nothing)", u.Used)
	}
	if again, err := b.c.CreateBudget(b.ctx, sdk.Budget{ID: budget, Limits: map[string]sdk.BudgetLimit{"tokens": {Hard: 1}}}); err != nil || again != budget {
		t.Fatalf("re-create = %s %v", again, err)
	}
	if u, _ := b.c.BudgetUsage(b.ctx, budget); u.Limits["tokens"].Hard != 1000 {
		t.Fatalf("re-creating changed the limits: %+v", u.Limits)
	}
	if _, err := b.c.BudgetUsage(b.ctx, model.NewUUID()); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("unknown budget: %v", err)
	}
	if err := l.Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaAdmit: jobs take slots of a quota; the concurrency bound and
// the rate window refuse further ones until released or the window moves.
func TestQuotaAdmit(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	conc, err := b.c.CreateQuota(b.ctx, sdk.Quota{Window: time.Minute, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	rate, err := b.c.CreateQuota(b.ctx, sdk.Quota{Window: time.Hour, MaxPerWindow: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call"})
	}
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"api"}})
	var ls []*sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "claimed three", func() bool {
		if l := b.claim(t, w); l != nil {
			ls = append(ls, l)
		}
		return len(ls) == 3
	})

	a0, err := ls[0].Admit(b.ctx, conc)
	if err != nil || !a0.Admitted {
		t.Fatalf("first admission = %+v %v", a0, err)
	}
	if again, err := ls[0].Admit(b.ctx, conc); err != nil || !again.Admitted {
		t.Fatalf("repeat by the holder = %+v %v", again, err)
	}
	if a1, err := ls[1].Admit(b.ctx, conc); err != nil || a1.Admitted || a1.Reason != "concurrency" {
		t.Fatalf("second holder = %+v %v", a1, err)
	}
	if u, err := b.c.QuotaUsage(b.ctx, conc); err != nil || u.Concurrent != 1 || u.InWindow != 1 || u.MaxConcurrent != 1 || u.Window != time.Minute {
		t.Fatalf("usage while held = %+v %v", u, err)
	}
	if err := a0.Release(b.ctx); err != nil {
		t.Fatal(err)
	}
	if a1, err := ls[1].Admit(b.ctx, conc); err != nil || !a1.Admitted {
		t.Fatalf("after release = %+v %v", a1, err)
	}

	for i := range 2 {
		if a, err := ls[i].Admit(b.ctx, rate); err != nil || !a.Admitted {
			t.Fatalf("rate admission %d = %+v %v", i, a, err)
		}
	}
	a2, err := ls[2].Admit(b.ctx, rate)
	if err != nil || a2.Admitted || a2.Reason != "rate" || a2.RetryAfter <= 0 || a2.RetryAfter > time.Hour {
		t.Fatalf("third in the window = %+v %v", a2, err)
	}
	if u, err := b.c.QuotaUsage(b.ctx, rate); err != nil || u.InWindow != 2 || u.MaxPerWindow != 2 {
		t.Fatalf("rate usage = %+v %v", u, err)
	}
	if _, err := ls[2].Admit(b.ctx, model.NewUUID()); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("unknown quota: %v", err)
	}
	for _, l := range ls {
		if err := l.Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBudgetQuotaBadInputFailsBeforeNetwork: invalid budgets and quotas
// are refused by a client whose connection is closed, so any network
// call would have failed otherwise.
func TestBudgetQuotaBadInputFailsBeforeNetwork(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	vc := valkeytest.Dial(t, valkeytest.Server(t).URL(), 0)
	c, err := sdk.NewClient(b.ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	vc.Close()
	for name, bud := range map[string]sdk.Budget{
		"NoLimits":      {},
		"EmptyDim":      {Limits: map[string]sdk.BudgetLimit{"": {Hard: 1}}},
		"ColonDim":      {Limits: map[string]sdk.BudgetLimit{"a:b": {Hard: 1}}},
		"Negative":      {Limits: map[string]sdk.BudgetLimit{"t": {Hard: -1}}},
		"SoftOverHard":  {Limits: map[string]sdk.BudgetLimit{"t": {Hard: 1, Soft: 2}}},
		"NegativeReset": {Limits: map[string]sdk.BudgetLimit{"t": {Hard: 1}}, ResetEvery: -time.Second},
		"SubMsReset":    {Limits: map[string]sdk.BudgetLimit{"t": {Hard: 1}}, ResetEvery: time.Microsecond},
	} {
		if _, err := c.CreateBudget(b.ctx, bud); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("budget %s: %v", name, err)
		}
	}
	for name, q := range map[string]sdk.Quota{
		"NoWindow":      {MaxPerWindow: 1},
		"SubSecond":     {Window: 1500 * time.Millisecond, MaxPerWindow: 1},
		"NoLimits":      {Window: time.Second},
		"NegativeLimit": {Window: time.Second, MaxPerWindow: -1, MaxConcurrent: 1},
	} {
		if _, err := c.CreateQuota(b.ctx, q); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("quota %s: %v", name, err)
		}
	}
	if _, err := c.BudgetUsage(b.ctx, model.UUID{}); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Errorf("budget usage without id: %v", err)
	}
	if _, err := c.QuotaUsage(b.ctx, model.UUID{}); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Errorf("quota usage without id: %v", err)
	}
}

// TestAdmittingMiddleware: the Admitting middleware runs a job only with
// a slot of the quota, delays the others (by the window's wait or by
// busy) and gives the slot back when the handler returns.
func TestAdmittingMiddleware(t *testing.T) {
	t.Parallel()

	t.Run("Concurrency", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		q, err := b.c.CreateQuota(b.ctx, sdk.Quota{Window: time.Minute, MaxConcurrent: 1})
		if err != nil {
			t.Fatal(err)
		}
		first := b.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call", Payload: []byte("first")})
		running, release := make(chan struct{}), make(chan struct{})
		mux := sdk.NewMux()
		mux.Use(sdk.Admitting(q, time.Hour))
		mux.Handle("call", func(ctx context.Context, job *sdk.Job) error {
			if string(job.Payload) == "first" {
				close(running)
				<-release
			}
			return nil
		})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"api"}, Concurrency: 2})
		stop := runWorker(t, b.ctx, w, mux.ServeJob)
		<-running
		second := b.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call", Payload: []byte("second")})
		valkeytest.Eventually(t, 30*time.Second, "second delayed by busy", func() bool {
			return b.state(t, second).PublicState == model.PublicDelayed
		})
		if u, err := b.c.QuotaUsage(b.ctx, q); err != nil || u.Concurrent != 1 {
			t.Fatalf("while the first runs: %+v %v", u, err)
		}
		close(release)
		valkeytest.Eventually(t, 30*time.Second, "first completed", func() bool {
			return b.state(t, first).PublicState == model.PublicCompleted
		})
		valkeytest.Eventually(t, 30*time.Second, "slot released", func() bool {
			u, err := b.c.QuotaUsage(b.ctx, q)
			return err == nil && u.Concurrent == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Rate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		q, err := b.c.CreateQuota(b.ctx, sdk.Quota{Window: time.Hour, MaxPerWindow: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids := []model.ExecutionID{b.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call"}),
			b.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call"})}
		var ran atomic.Int32
		mux := sdk.NewMux()
		mux.Use(sdk.Admitting(q, time.Second))
		mux.Handle("call", func(context.Context, *sdk.Job) error { ran.Add(1); return nil })
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"api"}})
		stop := runWorker(t, b.ctx, w, mux.ServeJob)
		valkeytest.Eventually(t, 30*time.Second, "one completed, one delayed to the window", func() bool {
			s0, s1 := b.state(t, ids[0]).PublicState, b.state(t, ids[1]).PublicState
			return (s0 == model.PublicCompleted && s1 == model.PublicDelayed) || (s1 == model.PublicCompleted && s0 == model.PublicDelayed)
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if n := ran.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		for _, id := range ids {
			if s := b.state(t, id); s.PublicState == model.PublicDelayed {
				// Delayed by the window's wait (about an hour), not by busy.
				until, _ := strconv.ParseInt(s.Fields["delay_until"], 10, 64)
				if time.UnixMilli(until).Before(time.Now().Add(30 * time.Minute)) {
					t.Fatalf("delay_until %q: want the window's wait, about an hour", s.Fields["delay_until"])
				}
			}
		}
	})
}
