package pgsuite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// TestDependencyDispatchPushed: with completion wake-ups (LISTEN
// ff_completion → host.CompletionConfig.Wakeups), a parent's completion
// releases its child at once, although pg_dependency_reconciler's own
// sweep runs only once an hour: the push, not the poll, moved the flow.
// The Poll row is the safety net alone (the stock 1 s sweep, stale_ms
// 1000), as every Postgres flow moved before. The latency of each hop
// (complete → child eligible) is logged for both, not asserted.
func TestDependencyDispatchPushed(t *testing.T) {
	t.Parallel()
	for _, push := range []bool{true, false} {
		name := "Push"
		if !push {
			name = "Poll"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testDependencyDispatch(t, push)
		})
	}
}

func testDependencyDispatch(t *testing.T, push bool) {
	c := newClient(t)
	ctx := pgtest.Context(t, 3*time.Minute)
	wake, stopWake, err := c.CompletionWakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopWake)

	dir := t.TempDir()
	b, err := os.ReadFile(fixture(t, "pg_dependency_reconciler"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pg_dependency_reconciler.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sig := &host.TestSignals{}
	sig.Init()
	csig := &host.CompletionSignals{}
	csig.Init()
	hc := host.Config{PluginDir: dir, CacheDir: cacheDir(), Postgres: c.PluginSQL(), Partitions: parts,
		Logger: pgtest.Logger(), TestSignals: sig}
	if push {
		hc.Plugins = map[string]host.PluginConfig{"pg_dependency_reconciler": {Interval: time.Hour, Config: map[string]string{"stale_ms": "0"}}}
		hc.Completions = host.CompletionConfig{Enabled: true, Wakeups: wake, Signals: csig}
	}
	h, err := host.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop(); h.Close(context.Background()) })
	// The first sweep (at start) ends before the flow exists: after it,
	// only a wake-up sweeps again within the hour.
	for range parts.Flow {
		wait(t, sig.PartitionDone.C(), time.Minute, "the first sweep's partition call")
	}

	f := &flowFixture{t: t, c: c, flow: model.NewUUID()}
	const levels = 4
	ids := make([]model.ExecutionID, levels)
	for i := range ids {
		ids[i] = f.member("push", i > 0)
		if i > 0 {
			f.group(ids[i], `{"kind":"all_of"}`, ids[i-1])
		}
	}
	for i, id := range ids {
		r := claim(t, c, "push")
		if r.ExecutionID != id {
			t.Fatalf("level %d: claimed %s, want %s", i, r.ExecutionID, id)
		}
		start := time.Now()
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence()}); err != nil {
			t.Fatal(err)
		}
		if i == levels-1 {
			break
		}
		pgtest.Eventually(t, time.Minute, "the child released", func() bool {
			return stateOf(t, c, ids[i+1]).Eligibility == model.EligibleNow
		})
		t.Logf("level %d: complete → child eligible %s", i, time.Since(start).Round(100*time.Microsecond))
	}
	if !push {
		return
	}
	if p := wait(t, csig.Pushed.C(), time.Minute, "a wake-up sweep"); p != parts.FlowPartition(f.flow) {
		t.Fatalf("wake-up swept %v, want the flow's partition %v", p, parts.FlowPartition(f.flow))
	}
	if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL AND flow_id = $1::uuid`, f.flow.String()); n > 1 {
		t.Fatalf("%d completion events of the flow undispatched, want at most the last level's", n)
	}
}

// TestDependencySafetySweepLeavesNothingBehind: with wake-ups on,
// pg_dependency_reconciler sweeps only every
// postgres.DependencySafetyInterval, as `fabric run --backend postgres`
// runs it; a completion whose wake-up never came (here the wake-up
// channel stays silent, as for a NOTIFY lost with the listener's
// connection) still releases its child within that interval.
func TestDependencySafetySweepLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 3*time.Minute)
	dir := t.TempDir()
	b, err := os.ReadFile(fixture(t, "pg_dependency_reconciler"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pg_dependency_reconciler.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sig := &host.TestSignals{}
	sig.Init()
	silent := make(chan model.Partition) // every wake-up lost
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir(), Postgres: c.PluginSQL(), Partitions: parts,
		Logger: pgtest.Logger(), TestSignals: sig,
		Plugins: map[string]host.PluginConfig{"pg_dependency_reconciler": {Interval: postgres.DependencySafetyInterval,
			Config: map[string]string{"stale_ms": "0"}}},
		Completions: host.CompletionConfig{Enabled: true, Wakeups: silent}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop(); h.Close(context.Background()) })
	for range parts.Flow {
		wait(t, sig.PartitionDone.C(), time.Minute, "the first sweep's partition call")
	}
	f := &flowFixture{t: t, c: c, flow: model.NewUUID()}
	parent := f.member("safety", false)
	child := f.member("safety", true)
	f.group(child, `{"kind":"all_of"}`, parent)
	r := claim(t, c, "safety")
	start := time.Now()
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: parent, Fence: r.Fence()}); err != nil {
		t.Fatal(err)
	}
	// Within the interval, with room for a loaded machine's sweep.
	pgtest.Eventually(t, postgres.DependencySafetyInterval+20*time.Second, "the child released by the safety sweep", func() bool {
		return stateOf(t, c, child).Eligibility == model.EligibleNow
	})
	t.Logf("released by the safety sweep after %s", time.Since(start).Round(time.Millisecond))
}

// TestDependencyStaleZeroTakesEveryEvent: with stale_ms 0 (the host is
// the dispatcher) pg_dependency_reconciler takes an unclaimed event
// whatever its committed_at_ms, the database's clock: one stamped ahead of
// the plugins' clock (a database clock ahead of the host's, or the
// millisecond rounding when a wake-up sweep runs right after the commit)
// is released at once, not left to a later sweep.
func TestDependencyStaleZeroTakesEveryEvent(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 3*time.Minute)
	f := &flowFixture{t: t, c: c, flow: model.NewUUID()}
	parent := f.member("stale-zero", false)
	child := f.member("stale-zero", true)
	f.group(child, `{"kind":"all_of"}`, parent)
	r := claim(t, c, "stale-zero")
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: parent, Fence: r.Fence()}); err != nil {
		t.Fatal(err)
	}
	// The plugins' clock runs `ahead`; the event is stamped beyond it.
	if _, err := c.Pool().Exec(ctx, `UPDATE ff_completion_event SET committed_at_ms = committed_at_ms + $1 WHERE execution_id = $2::uuid`,
		(2 * ahead).Milliseconds(), parent.UUIDString()); err != nil {
		t.Fatal(err)
	}
	startHost(t, c, map[string]host.PluginConfig{"pg_dependency_reconciler": {Interval: 100 * time.Millisecond,
		Config: map[string]string{"stale_ms": "0"}}})
	pgtest.Eventually(t, time.Minute, "the child released", func() bool {
		return stateOf(t, c, child).Eligibility == model.EligibleNow
	})
}
