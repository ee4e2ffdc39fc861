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

// beEnv is one backend row's client, worker constructor and context.
type beEnv struct {
	c      *sdk.Client
	worker func(sdk.WorkerConfig) *sdk.Worker
	ctx    context.Context
}

// openBackend opens a fresh deployment of be: setup gets five minutes
// (a first Postgres cluster runs initdb and the migrations), the test two
// after.
func openBackend(t *testing.T, be sdkBackend) *beEnv {
	t.Helper()
	c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
	return &beEnv{c: c, worker: worker, ctx: valkeytest.Context(t, 2*time.Minute)}
}

func (e *beEnv) create(t *testing.T, spec sdk.ExecutionSpec) model.ExecutionID {
	t.Helper()
	id, err := e.c.CreateExecution(e.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *beEnv) state(t *testing.T, id model.ExecutionID) *sdk.ExecutionState {
	t.Helper()
	st, err := e.c.State(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBudgetUsage: a budget created through the SDK takes reported usage
// and reads back its totals and limits, on both backends; a refused
// report adds nothing and re-creating changes nothing.
func TestBudgetUsage(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			e := openBackend(t, be)
			budget, err := e.c.CreateBudget(e.ctx, sdk.Budget{ScopeType: "tenant", ScopeID: "acme", ResetEvery: time.Hour,
				Limits: map[string]sdk.BudgetLimit{"tokens": {Hard: 1000, Soft: 500}, "usd_micros": {Hard: 90}}})
			if err != nil {
				t.Fatal(err)
			}
			u, err := e.c.BudgetUsage(e.ctx, budget)
			if err != nil {
				t.Fatal(err)
			}
			if len(u.Used) != 0 || u.Limits["tokens"] != (sdk.BudgetLimit{Hard: 1000, Soft: 500}) ||
				u.Limits["usd_micros"] != (sdk.BudgetLimit{Hard: 90}) || u.NextReset.IsZero() {
				t.Fatalf("fresh budget = %+v", u)
			}
			e.create(t, sdk.ExecutionSpec{Lane: "llm", Kind: "summarize"})
			l := claimOne(t, e.ctx, e.worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"llm"}}))
			if r, err := l.ReportUsage(e.ctx, budget, map[string]int64{"tokens": 600, "usd_micros": 40}, "step-1"); err != nil || !r.SoftBreach {
				t.Fatalf("first report = %+v %v", r, err)
			}
			if r, err := l.ReportUsage(e.ctx, budget, map[string]int64{"tokens": 10, "usd_micros": 60}, "step-2"); err != nil || !r.Exceeded || r.Dimension != "usd_micros" {
				t.Fatalf("second report = %+v %v", r, err)
			}
			u, err = e.c.BudgetUsage(e.ctx, budget)
			if err != nil {
				t.Fatal(err)
			}
			if u.Used["tokens"] != 600 || u.Used["usd_micros"] != 40 {
				t.Fatalf("usage = %v, want tokens 600 and usd_micros 40 (the refused report adds nothing)", u.Used)
			}
			if again, err := e.c.CreateBudget(e.ctx, sdk.Budget{ID: budget, Limits: map[string]sdk.BudgetLimit{"tokens": {Hard: 1}}}); err != nil || again != budget {
				t.Fatalf("re-create = %s %v", again, err)
			}
			if u, _ := e.c.BudgetUsage(e.ctx, budget); u.Limits["tokens"].Hard != 1000 {
				t.Fatalf("re-creating changed the limits: %+v", u.Limits)
			}
			if _, err := e.c.BudgetUsage(e.ctx, model.NewUUID()); !errors.Is(err, sdk.ErrNotFound) {
				t.Fatalf("unknown budget: %v", err)
			}
			if _, err := l.ReportUsage(e.ctx, model.NewUUID(), map[string]int64{"tokens": 1}, ""); !errors.Is(err, sdk.ErrNotFound) {
				t.Fatalf("usage on an unknown budget: %v", err)
			}
			if err := l.Complete(e.ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestQuotaAdmit: jobs take slots of a quota on both backends; the
// concurrency bound and the rate window refuse further ones until
// released or the window moves.
func TestQuotaAdmit(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			e := openBackend(t, be)
			conc, err := e.c.CreateQuota(e.ctx, sdk.Quota{Window: time.Minute, MaxConcurrent: 1})
			if err != nil {
				t.Fatal(err)
			}
			rate, err := e.c.CreateQuota(e.ctx, sdk.Quota{Window: time.Hour, MaxPerWindow: 2})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				e.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call"})
			}
			w := e.worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"api"}})
			ls := []*sdk.Lease{claimOne(t, e.ctx, w), claimOne(t, e.ctx, w), claimOne(t, e.ctx, w)}

			a0, err := ls[0].Admit(e.ctx, conc)
			if err != nil || !a0.Admitted {
				t.Fatalf("first admission = %+v %v", a0, err)
			}
			if again, err := ls[0].Admit(e.ctx, conc); err != nil || !again.Admitted {
				t.Fatalf("repeat by the holder = %+v %v", again, err)
			}
			if a1, err := ls[1].Admit(e.ctx, conc); err != nil || a1.Admitted || a1.Reason != "concurrency" {
				t.Fatalf("second holder = %+v %v", a1, err)
			}
			if u, err := e.c.QuotaUsage(e.ctx, conc); err != nil || u.Concurrent != 1 || u.InWindow != 1 || u.MaxConcurrent != 1 || u.Window != time.Minute {
				t.Fatalf("usage while held = %+v %v", u, err)
			}
			if err := a0.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			if a1, err := ls[1].Admit(e.ctx, conc); err != nil || !a1.Admitted {
				t.Fatalf("after release = %+v %v", a1, err)
			}

			for i := range 2 {
				if a, err := ls[i].Admit(e.ctx, rate); err != nil || !a.Admitted {
					t.Fatalf("rate admission %d = %+v %v", i, a, err)
				}
			}
			a2, err := ls[2].Admit(e.ctx, rate)
			if err != nil || a2.Admitted || a2.Reason != "rate" || a2.RetryAfter <= 0 || a2.RetryAfter > time.Hour {
				t.Fatalf("third in the window = %+v %v", a2, err)
			}
			if u, err := e.c.QuotaUsage(e.ctx, rate); err != nil || u.InWindow != 2 || u.MaxPerWindow != 2 {
				t.Fatalf("rate usage = %+v %v", u, err)
			}
			if _, err := ls[2].Admit(e.ctx, model.NewUUID()); !errors.Is(err, sdk.ErrNotFound) {
				t.Fatalf("unknown quota: %v", err)
			}
			if _, err := e.c.QuotaUsage(e.ctx, model.NewUUID()); !errors.Is(err, sdk.ErrNotFound) {
				t.Fatalf("usage of an unknown quota: %v", err)
			}
			for _, l := range ls {
				if err := l.Complete(e.ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestAdmittingMiddleware: the Admitting middleware runs a job only with
// a slot of the quota, delays the others (by the window's wait or by
// busy) and gives the slot back when the handler returns, on both
// backends.
func TestAdmittingMiddleware(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name+"/Concurrency", func(t *testing.T) {
			t.Parallel()
			e := openBackend(t, be)
			q, err := e.c.CreateQuota(e.ctx, sdk.Quota{Window: time.Minute, MaxConcurrent: 1})
			if err != nil {
				t.Fatal(err)
			}
			first := e.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call", Payload: []byte("first")})
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
			w := e.worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"api"}, Concurrency: 2})
			stop := runWorker(t, e.ctx, w, mux.ServeJob)
			<-running
			second := e.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call", Payload: []byte("second")})
			valkeytest.Eventually(t, 30*time.Second, "second delayed by busy", func() bool {
				return e.state(t, second).PublicState == model.PublicDelayed
			})
			if u, err := e.c.QuotaUsage(e.ctx, q); err != nil || u.Concurrent != 1 {
				t.Fatalf("while the first runs: %+v %v", u, err)
			}
			close(release)
			valkeytest.Eventually(t, 30*time.Second, "first completed", func() bool {
				return e.state(t, first).PublicState == model.PublicCompleted
			})
			valkeytest.Eventually(t, 30*time.Second, "slot released", func() bool {
				u, err := e.c.QuotaUsage(e.ctx, q)
				return err == nil && u.Concurrent == 0
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})

		t.Run(be.name+"/Rate", func(t *testing.T) {
			t.Parallel()
			e := openBackend(t, be)
			q, err := e.c.CreateQuota(e.ctx, sdk.Quota{Window: time.Hour, MaxPerWindow: 1})
			if err != nil {
				t.Fatal(err)
			}
			ids := []model.ExecutionID{e.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call"}),
				e.create(t, sdk.ExecutionSpec{Lane: "api", Kind: "call"})}
			var ran atomic.Int32
			mux := sdk.NewMux()
			mux.Use(sdk.Admitting(q, time.Second))
			mux.Handle("call", func(context.Context, *sdk.Job) error { ran.Add(1); return nil })
			w := e.worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"api"}})
			stop := runWorker(t, e.ctx, w, mux.ServeJob)
			valkeytest.Eventually(t, 30*time.Second, "one completed, one delayed to the window", func() bool {
				s0, s1 := e.state(t, ids[0]).PublicState, e.state(t, ids[1]).PublicState
				return (s0 == model.PublicCompleted && s1 == model.PublicDelayed) || (s1 == model.PublicCompleted && s0 == model.PublicDelayed)
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if n := ran.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
			for _, id := range ids {
				if s := e.state(t, id); s.PublicState == model.PublicDelayed {
					// Delayed by the window's wait (about an hour), not by busy.
					until, _ := strconv.ParseInt(s.Fields["delay_until"], 10, 64)
					if time.UnixMilli(until).Before(time.Now().Add(30 * time.Minute)) {
						t.Fatalf("delay_until %q: want the window's wait, about an hour", s.Fields["delay_until"])
					}
				}
			}
		})
	}
}

// TestReportProgressAndUsage: a leased job records progress on its
// execution and reports budget usage, on both backends: under the soft
// limit, past it, a repeated key, and a report that would pass the hard
// limit (refused, nothing added); bad input is refused and a report after
// the lease ended is refused by the backend.
func TestReportProgressAndUsage(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			e := openBackend(t, be)
			budget, err := e.c.CreateBudget(e.ctx, sdk.Budget{ScopeType: "tenant", ScopeID: "acme",
				Limits: map[string]sdk.BudgetLimit{"tokens": {Hard: 1000, Soft: 500}}})
			if err != nil {
				t.Fatal(err)
			}
			id := e.create(t, sdk.ExecutionSpec{Lane: "llm", Kind: "summarize"})
			l := claimOne(t, e.ctx, e.worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"llm"}}))

			if err := l.ReportProgress(e.ctx, 42.5, "chunk 17 of 40"); err != nil {
				t.Fatal(err)
			}
			if s := e.state(t, id); s.Fields["progress_pct"] != "42.5" || s.Fields["progress_message"] != "chunk 17 of 40" || s.Fields["progress_updated_at"] == "" {
				t.Fatalf("progress fields = %v", s.Fields)
			}
			for _, bad := range []float64{-1, 100.5} {
				if err := l.ReportProgress(e.ctx, bad, ""); !errors.Is(err, sdk.ErrInvalidInput) {
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
				r, err := l.ReportUsage(e.ctx, budget, map[string]int64{"tokens": s.n}, s.key)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if r.Exceeded != s.want.Exceeded || r.SoftBreach != s.want.SoftBreach || r.Duplicate != s.want.Duplicate {
					t.Fatalf("step %d: report %+v, want %+v", i, r, s.want)
				}
			}
			for name, u := range map[string]map[string]int64{"Empty": {}, "EmptyDimension": {"": 1}, "Negative": {"tokens": -1},
				"Colon": {"a:b": 1}} {
				if _, err := l.ReportUsage(e.ctx, budget, u, ""); !errors.Is(err, sdk.ErrInvalidInput) {
					t.Errorf("%s: %v", name, err)
				}
			}
			if u, err := e.c.BudgetUsage(e.ctx, budget); err != nil || len(u.Used) != 1 || u.Used["tokens"] != 600 {
				t.Fatalf("usage = %+v %v; want tokens 600 (the duplicate, the refused and the invalid reports add nothing)", u, err)
			}
			if err := l.Complete(e.ctx, nil); err != nil {
				t.Fatal(err)
			}
			// The lease is gone: a late progress report is refused by the backend.
			if err := l.ReportProgress(e.ctx, 100, "done"); err == nil {
				t.Fatal("progress after the lease ended was accepted")
			}
			if s := e.state(t, id); s.Fields["progress_pct"] != "42.5" {
				t.Fatalf("a refused progress report wrote: %v", s.Fields)
			}
		})
	}
}
