package backendtest

import (
	"context"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
)

// periodicOperations are the backend.PeriodicDriver operations the suite
// exercises (appended to Operations).
var periodicOperations = []string{"AddPeriodic", "RemovePeriodic", "ListPeriodic", "FirePeriodic"}

func init() { Operations = append(Operations, periodicOperations...) }

// runPeriodic registers the PeriodicDriver subtests; a driver that does
// not implement it skips them.
func runPeriodic(sub func(name string, fn func(e *env))) {
	sub("Periodic/AddListRemove", testPeriodicStore)
	sub("Periodic/Fire", testPeriodicFire)
	sub("Periodic/FireConcurrent", testPeriodicFireConcurrent)
}

func (e *env) periodic() backend.PeriodicDriver {
	pd, ok := e.d.(backend.PeriodicDriver)
	if !ok {
		e.t.Skipf("%s driver has no backend.PeriodicDriver", e.d.Name())
	}
	return pd
}

// schedule is a fixed-interval schedule on the env's lane named after it,
// anchored at anchor, first due at anchor+every.
func (e *env) schedule(suffix string, anchor, every int64) *backend.PeriodicSchedule {
	return &backend.PeriodicSchedule{Name: e.lane + suffix, LaneID: e.lane, ExecutionKind: "tick", Namespace: "bt",
		Payload: []byte("p"), Priority: 3, PolicyJSON: `{"priority":3}`, Tags: map[string]string{"k": "v"},
		EveryMs: every, AnchorMs: anchor, NextDueMs: anchor + every, CreatedAtMs: anchor, Creator: "backendtest"}
}

// find returns the listed schedule named name.
func (e *env) findPeriodic(pd backend.PeriodicDriver, name string) (backend.PeriodicSchedule, bool) {
	e.t.Helper()
	l, err := pd.ListPeriodic(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range l {
		if s.Name == name {
			return s, true
		}
	}
	return backend.PeriodicSchedule{}, false
}

// testPeriodicStore: a schedule added is listed as added; adding the name
// again replaces it; removing it twice is ErrPeriodicNotFound the second
// time.
func testPeriodicStore(e *env) {
	pd := e.periodic()
	s := e.schedule("-a", 1_000_000, 60_000)
	if err := pd.AddPeriodic(e.ctx, s); err != nil {
		e.t.Fatal(err)
	}
	got, ok := e.findPeriodic(pd, s.Name)
	if !ok || got.LaneID != e.lane || got.ExecutionKind != "tick" || got.Namespace != "bt" || got.EveryMs != 60_000 ||
		got.Cron != "" || got.NextDueMs != 1_060_000 || got.LastTickMs != 0 || got.LastExecutionID != "" {
		e.t.Fatalf("listed %+v %v", got, ok)
	}
	c := e.schedule("-a", 1_000_000, 0)
	c.Cron, c.NextDueMs, c.ExecutionKind = "0 3 * * *", 2_000_000, "nightly"
	if err := pd.AddPeriodic(e.ctx, c); err != nil {
		e.t.Fatal(err)
	}
	if got, _ := e.findPeriodic(pd, s.Name); got.Cron != "0 3 * * *" || got.EveryMs != 0 || got.ExecutionKind != "nightly" ||
		got.NextDueMs != 2_000_000 {
		e.t.Fatalf("replaced: %+v", got)
	}
	if err := pd.RemovePeriodic(e.ctx, s.Name); err != nil {
		e.t.Fatal(err)
	}
	wantErr(e.t, "second remove", pd.RemovePeriodic(e.ctx, s.Name), backend.ErrPeriodicNotFound)
	if _, ok := e.findPeriodic(pd, s.Name); ok {
		e.t.Fatal("removed schedule still listed")
	}
}

// mine keeps the fired executions of schedule name (other subtests'
// schedules may share the partition).
func mine(part model.Partition, name string, fired []model.ExecutionID, ticks ...int64) (n int, missing []int64) {
	set := map[model.ExecutionID]int{}
	for _, id := range fired {
		set[id]++
	}
	for _, t := range ticks {
		c := set[periodic.TickID(part, name, t)]
		n += c
		if c == 0 {
			missing = append(missing, t)
		}
	}
	return n, missing
}

// testPeriodicFire: a due tick creates its execution (the schedule's
// template, runnable now) and moves the schedule; firing again at the
// same time creates nothing; overdue ticks fire one by one; a removed
// schedule fires no more.
func testPeriodicFire(e *env) {
	pd := e.periodic()
	part := e.d.Partitions().SoloPartition(e.lane)
	t0 := time.Now().UnixMilli() - 10_000
	s := e.schedule("-f", t0, 1_000)
	if err := pd.AddPeriodic(e.ctx, s); err != nil {
		e.t.Fatal(err)
	}
	fire := func(now int64) *backend.FirePeriodicResult {
		e.t.Helper()
		r, err := pd.FirePeriodic(e.ctx, &backend.FirePeriodicParams{Partition: part.Index, NowMs: now})
		if err != nil {
			e.t.Fatal(err)
		}
		return r
	}
	r := fire(t0 + 1_000)
	if n, miss := mine(part, s.Name, r.Fired, t0+1_000); n != 1 || len(miss) != 0 {
		e.t.Fatalf("first fire: %v", r.Fired)
	}
	id := periodic.TickID(part, s.Name, t0+1_000)
	st := e.state(id)
	wantState(e.t, st, model.PhaseRunnable, model.PublicWaiting)
	if st.LaneID != e.lane || st.Kind != "tick" || st.Namespace != "bt" || st.Priority != 3 {
		e.t.Fatalf("fired execution: %+v", st)
	}
	if got, _ := e.findPeriodic(pd, s.Name); got.NextDueMs != t0+2_000 || got.LastTickMs != t0+1_000 || got.LastExecutionID != id {
		e.t.Fatalf("after the first tick: %+v", got)
	}
	if r := fire(t0 + 1_000); len(r.Fired) != 0 {
		if n, _ := mine(part, s.Name, r.Fired, t0+1_000, t0+2_000); n != 0 {
			e.t.Fatalf("fired again at the same time: %v", r.Fired)
		}
	}
	r = fire(t0 + 3_500)
	if n, miss := mine(part, s.Name, r.Fired, t0+2_000, t0+3_000); n != 2 || len(miss) != 0 {
		e.t.Fatalf("overdue ticks: %v (missing %v)", r.Fired, miss)
	}
	if r.NextDueMs == 0 || r.NextDueMs > t0+4_000 {
		e.t.Fatalf("next due %d, want <= %d", r.NextDueMs, t0+4_000)
	}
	if err := pd.RemovePeriodic(e.ctx, s.Name); err != nil {
		e.t.Fatal(err)
	}
	r = fire(t0 + 9_000)
	if n, _ := mine(part, s.Name, r.Fired, t0+4_000, t0+5_000, t0+6_000, t0+7_000, t0+8_000, t0+9_000); n != 0 {
		e.t.Fatalf("a removed schedule fired: %v", r.Fired)
	}
}

// testPeriodicFireConcurrent: firers racing on one partition create each
// tick's execution exactly once between them.
func testPeriodicFireConcurrent(e *env) {
	pd := e.periodic()
	part := e.d.Partitions().SoloPartition(e.lane)
	t0 := time.Now().UnixMilli() - 60_000
	s := e.schedule("-c", t0, 1_000)
	if err := pd.AddPeriodic(e.ctx, s); err != nil {
		e.t.Fatal(err)
	}
	ticks := []int64{t0 + 1_000, t0 + 2_000, t0 + 3_000, t0 + 4_000, t0 + 5_000}
	var mu sync.Mutex
	var all []model.ExecutionID
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, now := range ticks {
				r, err := pd.FirePeriodic(context.WithoutCancel(e.ctx), &backend.FirePeriodicParams{Partition: part.Index, NowMs: now})
				if err != nil {
					e.t.Error(err)
					return
				}
				mu.Lock()
				all = append(all, r.Fired...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n, miss := mine(part, s.Name, all, ticks...); n != len(ticks) || len(miss) != 0 {
		e.t.Fatalf("4 firers created %d executions for %d ticks (missing %v)", n, len(ticks), miss)
	}
}

// periodicUnmigrated are RunUnmigrated's cases of the PeriodicDriver
// operations (none when the driver lacks them).
func periodicUnmigrated(ctx context.Context, d backend.Driver) map[string]func() error {
	pd, ok := d.(backend.PeriodicDriver)
	if !ok {
		return nil
	}
	return map[string]func() error{
		"AddPeriodic": func() error {
			return pd.AddPeriodic(ctx, &backend.PeriodicSchedule{Name: "bt", LaneID: "bt", EveryMs: 1000, NextDueMs: 1000})
		},
		"RemovePeriodic": func() error { return pd.RemovePeriodic(ctx, "bt") },
		"ListPeriodic": func() error {
			_, err := pd.ListPeriodic(ctx)
			return err
		},
		"FirePeriodic": func() error {
			_, err := pd.FirePeriodic(ctx, &backend.FirePeriodicParams{NowMs: 1})
			return err
		},
	}
}
