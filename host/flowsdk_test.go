package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// End-to-end flow tests: flows built with the SDK (Client.CreateFlow,
// Flow.Add) while SDK workers run them. The workers never resolve edges
// themselves (ResolveDependencies: false): only the loaded dependency
// dispatcher (and the SDK's own check for parents that finished before
// their edge existed) may make a child runnable.

// setupSDKFlowEnv returns a flowEnv and an SDK client on its database,
// whose ff:config:partitions it sets to the host's 4/2/2.
func setupSDKFlowEnv(t *testing.T, o flowOpts) (*flowEnv, *sdk.Client) {
	t.Helper()
	e := setupFlowEnv(t, o)
	if err := e.c.EnsurePartitionConfig(e.ctx); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(e.ctx, sdk.ClientConfig{Backend: e.c, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	return e, c
}

// runWorkers starts n SDK workers on lanes running h; they stop (and are
// closed) when the test ends, or earlier through the returned stop.
func (e *flowEnv) runWorkers(n int, cfg sdk.WorkerConfig, h sdk.Handler) (stop func()) {
	e.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = valkeytest.Logger()
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	var workers []*sdk.Worker
	for i := 0; i < n; i++ {
		c := cfg
		c.InstanceID = fmt.Sprintf("%s-%d-%s", cfg.WorkerID, i, model.NewUUID())
		w, err := sdk.Connect(e.ctx, e.c, c)
		if err != nil {
			cancel()
			e.t.Fatal(err)
		}
		workers = append(workers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx, h); err != nil {
				e.t.Errorf("worker %s: %v", c.InstanceID, err)
			}
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			for _, w := range workers {
				_ = w.Close(context.Background())
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// dagRun records what the workers did to the members of test DAGs. A
// member is named in its payload ({"name": ...}); its parents are known
// by name before it is added, so the handler can check them even when it
// runs before Flow.Add returns.
type dagRun struct {
	mu        sync.Mutex
	parents   map[string][]string
	gates     map[string]chan struct{} // handler waits on it before finishing
	started   map[string]time.Time
	completed map[string]time.Time // after the handler's own Lease.Complete returned
	runs      map[string]int
	bad       []string
}

func newDAGRun() *dagRun {
	return &dagRun{parents: map[string][]string{}, gates: map[string]chan struct{}{}, started: map[string]time.Time{},
		completed: map[string]time.Time{}, runs: map[string]int{}}
}

// member declares name with its parents (and an optional gate the
// handler waits on) and returns the spec to add it with.
func (r *dagRun) member(name string, gate chan struct{}, parents ...string) sdk.ExecutionSpec {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parents[name] = parents
	if gate != nil {
		r.gates[name] = gate
	}
	b, _ := json.Marshal(map[string]string{"name": name})
	return sdk.ExecutionSpec{Lane: "dag", Kind: "dag.step", Payload: b}
}

// handle is the workers' handler: it checks that every parent of the
// member completed before it started, waits on the member's gate, and
// completes the lease itself so the completion time is known.
func (r *dagRun) handle(ctx context.Context, j *sdk.Job) error {
	var p struct{ Name string }
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.Name == "" {
		return sdk.Permanent(fmt.Errorf("payload %q: %v", j.Payload, err))
	}
	r.mu.Lock()
	r.runs[p.Name]++
	r.started[p.Name] = time.Now()
	parents, known := r.parents[p.Name]
	if !known {
		r.bad = append(r.bad, p.Name+" ran before it was declared")
	}
	for _, parent := range parents {
		if _, ok := r.completed[parent]; !ok {
			r.bad = append(r.bad, fmt.Sprintf("%s started before its parent %s completed", p.Name, parent))
		}
	}
	gate := r.gates[p.Name]
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := j.Lease().Complete(ctx, []byte(`"ok"`)); err != nil {
		return err
	}
	r.mu.Lock()
	r.completed[p.Name] = time.Now()
	r.mu.Unlock()
	return nil
}

func (r *dagRun) done(names ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		if _, ok := r.completed[n]; !ok {
			return false
		}
	}
	return true
}

func (r *dagRun) isStarted(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.started[name]
	return ok
}

// check fails the test on an ordering violation or a member that did not
// run exactly once.
func (r *dagRun) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bad {
		t.Error(b)
	}
	for name := range r.parents {
		if n := r.runs[name]; n != 1 {
			t.Errorf("%s ran %d times, want exactly once", name, n)
		}
	}
}

// checkStored asserts every member is terminal with outcome success after
// a single attempt.
func (e *flowEnv) checkStored(ids map[string]model.ExecutionID) {
	e.t.Helper()
	for name, id := range ids {
		if out, n := e.core(id, "terminal_outcome"), e.core(id, "total_attempt_count"); out != "success" || n != "1" {
			e.t.Errorf("%s (%s): terminal_outcome %q after %s attempts, want success after 1", name, id, out, n)
		}
	}
}

// sdkFlowOpts loads the flow engine plugins of the SDK tests. The
// reconciler is loaded but its sweep is pushed out of the test's reach,
// so a lost completion fails the test instead of being repaired later.
func sdkFlowOpts() flowOpts {
	return flowOpts{plugins: []string{"dependency", "edge_cancel", "dependency_reconciler"}, listener: true,
		config: map[string]host.PluginConfig{"dependency_reconciler": {Interval: time.Hour}}}
}

// dagWorker is the worker config of the DAG tests: engine-side
// resolution only, and a short idle poll so claim latency reflects the
// engine rather than the workers' idle backoff.
var dagWorker = sdk.WorkerConfig{WorkerID: "dag-worker", Lanes: []string{"dag"}, Concurrency: 4,
	IdlePollMin: time.Millisecond, IdlePollMax: 5 * time.Millisecond, ResolveDependencies: false}

// 10-level linear flows built with the SDK complete end to end with SDK
// workers, each level exactly once and strictly after the one before;
// the per-level latency (level k's completion committed → level k+1's
// handler started: listener, dispatcher, worker claim) is logged.
func TestFlowEngineSDKTenLevelChain(t *testing.T) {
	e, client := setupSDKFlowEnv(t, sdkFlowOpts())
	run := newDAGRun()
	e.runWorkers(2, dagWorker, run.handle)

	const levels, chains = 10, 3
	var lat, engine []time.Duration
	for c := range chains {
		flow, err := client.CreateFlow(e.ctx, "chain")
		if err != nil {
			t.Fatal(err)
		}
		// Level 0 waits on a gate until the whole chain is built, so
		// every edge is resolved by the dispatcher on a completion.
		gate := make(chan struct{})
		names := make([]string, levels)
		ids := map[string]model.ExecutionID{}
		var prev []model.ExecutionID
		for l := range levels {
			names[l] = fmt.Sprintf("c%d-l%d", c, l)
			var g chan struct{}
			var parents []string
			if l == 0 {
				g = gate
			} else {
				parents = []string{names[l-1]}
			}
			id, err := flow.Add(e.ctx, run.member(names[l], g, parents...), prev...)
			if err != nil {
				t.Fatal(err)
			}
			ids[names[l]], prev = id, []model.ExecutionID{id}
		}
		close(gate)
		valkeytest.Eventually(t, 30*time.Second, fmt.Sprintf("chain %d complete", c), func() bool { return run.done(names...) })
		run.mu.Lock()
		for l := 0; l+1 < levels; l++ {
			lat = append(lat, run.started[names[l+1]].Sub(run.completed[names[l]]))
		}
		run.mu.Unlock()
		for l := 0; l+1 < levels; l++ {
			engine = append(engine, e.resolvedAfter(ids[names[l]], ids[names[l+1]]))
		}
		e.checkStored(ids)
	}
	run.check(t)
	// The last edge's resolution is counted once its call returns.
	waitActed(t, e.h, "dependency", uint32(chains*(levels-1)))
	t.Logf("SDK 10-level chain, per-level latency, %d samples: level k completed → level k+1 eligible (server clock, ms): p50=%s p99=%s max=%s; "+
		"level k completed → level k+1 handler started: p50=%s p99=%s max=%s",
		len(lat), percentile(engine, 0.5), percentile(engine, 0.99), slices.Max(engine),
		percentile(lat, 0.5), percentile(lat, 0.99), slices.Max(lat))
}

// resolvedAfter returns how long after parent's completion (completed_at)
// the edge parent → child was resolved (the edge's last_resolved_at, the
// moment the child became eligible), both on the server's clock.
func (e *flowEnv) resolvedAfter(parent, child model.ExecutionID) time.Duration {
	e.t.Helper()
	edges, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Smembers().Key(model.KeysFor(child).DepsAllEdges()).Build()).AsStrSlice()
	if err != nil || len(edges) != 1 {
		e.t.Fatalf("edges of %s: %v %v", child, edges, err)
	}
	resolved, err1 := strconv.ParseInt(e.hgetall(model.KeysFor(child).DepEdge(edges[0]))["last_resolved_at"], 10, 64)
	completed, err2 := strconv.ParseInt(e.core(parent, "completed_at"), 10, 64)
	if err1 != nil || err2 != nil {
		e.t.Fatalf("resolved %v, completed %v", err1, err2)
	}
	return time.Duration(resolved-completed) * time.Millisecond
}

// Diamonds root → {left, right} → join built with the SDK while SDK
// workers run them complete end to end, every member exactly once and
// after its parents. In half of them right is still running when join is
// added (left already done), the case where a child with one finished
// and one running parent must stay blocked until both edges exist.
func TestFlowEngineSDKDiamonds(t *testing.T) {
	e, client := setupSDKFlowEnv(t, sdkFlowOpts())
	run := newDAGRun()
	e.runWorkers(2, dagWorker, run.handle)

	const diamonds = 12
	ids := map[string]model.ExecutionID{}
	var all []string
	for d := range diamonds {
		flow, err := client.CreateFlow(e.ctx, "diamond")
		if err != nil {
			t.Fatal(err)
		}
		n := func(s string) string { return fmt.Sprintf("d%d-%s", d, s) }
		add := func(name string, gate chan struct{}, parents ...string) {
			t.Helper()
			var after []model.ExecutionID
			for _, p := range parents {
				after = append(after, ids[p])
			}
			id, err := flow.Add(e.ctx, run.member(name, gate, parents...), after...)
			if err != nil {
				t.Fatal(err)
			}
			ids[name] = id
			all = append(all, name)
		}
		var rightGate chan struct{}
		if d%2 == 1 {
			rightGate = make(chan struct{})
		}
		add(n("root"), nil)
		add(n("left"), nil, n("root"))
		add(n("right"), rightGate, n("root"))
		if rightGate != nil {
			valkeytest.Eventually(t, 30*time.Second, "left done and right running", func() bool {
				return run.done(n("left")) && run.isStarted(n("right"))
			})
		}
		add(n("join"), nil, n("left"), n("right"))
		if rightGate != nil {
			close(rightGate)
		}
	}
	valkeytest.Eventually(t, 30*time.Second, "every diamond complete", func() bool { return run.done(all...) })
	run.check(t)
	e.checkStored(ids)
}
