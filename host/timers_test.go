package host_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

// commandCalls sums the calls of every command in INFO commandstats,
// less the INFO calls themselves.
func commandCalls(t *testing.T, c *valkey.Client) int64 {
	t.Helper()
	raw := c.Raw()
	s, err := raw.Do(context.Background(), raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		total += n
	}
	return total
}

// timedPlugins are the plugins TestDueTimers runs: the two busiest
// due-index scanners (750 ms and 1.5 s), to keep the test light under
// -race on a shared machine.
var timedPlugins = []string{"delayed_promoter", "lease_expiry"}

type timerRun struct {
	idlePerSec float64
	lateness   []int64 // ms past delay_until, per promoted execution
}

// runTimers starts a host with the default plugin set at the engine's
// intervals over 256 partitions on db of a private server, measures idle
// commands/s once every due-timer plugin finished its first sweep, then
// the promotion lateness of delayed executions.
func runTimers(t *testing.T, srv *valkey.Server, db int, timers host.TimerConfig) timerRun {
	t.Helper()
	ctx := valkeytest.Context(t, 2*time.Minute)
	c := valkeytest.Dial(t, srv.URL(), db)
	if err := c.Bootstrap(ctx, valkey.BootstrapConfig{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range timedPlugins {
		copyFile(t, fixture(t, name), filepath.Join(dir, name+".wasm"))
	}
	logs := &logBuffer{}
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir, Backend: c, Timers: timers,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	<-h.Started()
	parts := int64(c.Partitions().Flow)
	valkeytest.Eventually(t, 60*time.Second, "first sweeps done", func() bool {
		for _, name := range timedPlugins {
			if st, _ := h.Plugin(name); st.Calls < parts {
				return false
			}
		}
		return true
	})
	var run timerRun
	// The least of three windows: on a loaded machine the wake-up
	// subscription can come up after the first sweeps, and the catch-up
	// sweep the host then runs (every partition once) may fall in the
	// first window; the idle regime is what the later ones see.
	const window = 2 * time.Second
	for i := range 3 {
		before, start := commandCalls(t, c), time.Now()
		<-time.After(window) // a measurement window, not a synchronisation
		if r := float64(commandCalls(t, c)-before) / time.Since(start).Seconds(); i == 0 || r < run.idlePerSec {
			run.idlePerSec = r
		}
	}

	now, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	due := map[model.ExecutionID]int64{}
	for i := range 20 {
		id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(rand.IntN(int(parts)))}, model.NewUUID())
		at := now + 400 + int64(i)*60
		if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "default", ExecutionKind: "k", DelayUntil: at}); err != nil {
			t.Fatal(err)
		}
		due[id] = at
	}
	for id, at := range due {
		var core map[string]string
		valkeytest.Eventually(t, 20*time.Second, string(id)+" promoted", func() bool {
			core, err = c.ExecutionCore(ctx, id)
			return err == nil && core["eligibility_state"] == "eligible_now"
		})
		promoted, _ := strconv.ParseInt(core["last_transition_at"], 10, 64)
		run.lateness = append(run.lateness, promoted-at)
	}
	slices.Sort(run.lateness)
	return run
}

func pct(v []int64, p float64) int64 { return v[int(float64(len(v)-1)*p)] }

// TestDueTimers measures, on a private server with 256 flow partitions and
// the delayed promoter and lease-expiry scanner at the engine's intervals, idle Valkey commands/s and
// the promotion lateness of delayed executions, with due-time timers and
// with FlowFabric's fixed polling. It asserts only what holds under -race
// on a loaded machine: timers cost fewer idle commands and never promote
// early; the figures are logged.
//
// Not parallel: the polling phase keeps two cores busy on purpose.
func TestDueTimers(t *testing.T) {
	srv := valkeytest.NewServer(t)
	on := runTimers(t, srv, 0, host.TimerConfig{})
	off := runTimers(t, srv, 1, host.TimerConfig{Disabled: true})
	t.Logf("idle commands/s over 256 partitions: timers %.0f, fixed polling %.0f", on.idlePerSec, off.idlePerSec)
	t.Logf("promotion lateness ms: timers p50 %d p99 %d max %d; fixed polling p50 %d p99 %d max %d",
		pct(on.lateness, 0.5), pct(on.lateness, 0.99), on.lateness[len(on.lateness)-1],
		pct(off.lateness, 0.5), pct(off.lateness, 0.99), off.lateness[len(off.lateness)-1])
	if on.idlePerSec >= off.idlePerSec {
		t.Errorf("timers-on idle commands/s %.0f not below polling %.0f", on.idlePerSec, off.idlePerSec)
	}
	for _, r := range [][]int64{on.lateness, off.lateness} {
		if r[0] < 0 {
			t.Errorf("promoted %d ms before its due time", -r[0])
		}
	}
}

// manualClock is a host.WaitClock that stands still until the test moves
// it: the host's waits fire only when AdvanceTo reaches them.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []manualWaiter
}

type manualWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, manualWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// AdvanceTo sets the time to t and fires every wait due by then.
func (c *manualClock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(t) {
			kept = append(kept, w)
		} else {
			w.ch <- t
		}
	}
	c.waiters = kept
}

// pending reports whether a wait is pending at exactly at (a wait
// abandoned by a wake-up stays listed; it never fires anything).
func (c *manualClock) pending(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if w.at.Equal(at) {
			return true
		}
	}
	return false
}

// TestDueTimerOnFakeClock runs the delayed_promoter .wasm with its poll
// interval at one hour, on a host whose clock (the loop's waits and the
// plugins' now_ms) stands still until the test moves it. The host arms a
// wait for exactly the due time of a delayed execution it saw in its first
// sweep, and one for an execution created later, which the zadd
// notification made it scan at once; moving the clock to each due time
// (not a millisecond past it) promotes that execution then, stamped with
// that time, while the next
// poll is an hour away. With timers off (polling only) no wait is armed
// before the next poll and the test fails.
func TestDueTimerOnFakeClock(t *testing.T) {
	t.Parallel()
	ctx := valkeytest.Context(t, 2*time.Minute)
	c := valkeytest.Client(t)
	serverNow, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(serverNow)
	clock := &manualClock{now: start}
	const interval = time.Hour
	dir := t.TempDir()
	copyFile(t, fixture(t, "delayed_promoter"), filepath.Join(dir, "delayed_promoter.wasm"))
	logs := &logBuffer{}
	h, err := host.New(host.Config{
		PluginDir: dir, CacheDir: cacheDir, Backend: c, Clock: clock,
		Now:        func(context.Context) (int64, error) { return clock.Now().UnixMilli(), nil },
		Partitions: model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2},
		Plugins:    map[string]host.PluginConfig{"delayed_promoter": {Interval: interval}},
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// Leases run on the server's clock; this host's clock jumps ahead
		// of it by design, so a lease would look spent. One host needs none.
		Leases: partlease.Config{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Due times lie ahead of the server's own clock too, so
	// ff_create_execution (server TIME) indexes both as delayed.
	create := func(part uint16, due int64) model.ExecutionID {
		id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: part}, model.NewUUID())
		if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "default", ExecutionKind: "k", DelayUntil: due}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// The host schedules at the due score itself, not a margin past it:
	// its clock then reads the score, so the item is due.
	wakeAt := func(due int64) time.Time { return time.UnixMilli(due) }
	promotedAt := func(id model.ExecutionID) string {
		core, err := c.ExecutionCore(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if core["eligibility_state"] != "eligible_now" {
			return ""
		}
		return core["last_transition_at"]
	}

	first := create(1, serverNow+120_000)
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	<-h.Started()
	valkeytest.Eventually(t, 30*time.Second, "a wait armed for the first due time", func() bool {
		return clock.pending(wakeAt(serverNow + 120_000))
	})
	// Created after the first sweep: only the zadd wake-up can make the
	// host see it before the next poll.
	second := create(2, serverNow+60_000)
	valkeytest.Eventually(t, 30*time.Second, "a wait armed for the second due time", func() bool {
		return clock.pending(wakeAt(serverNow + 60_000))
	})
	if promotedAt(first) != "" || promotedAt(second) != "" {
		t.Fatal("promoted before the clock moved")
	}

	clock.AdvanceTo(wakeAt(serverNow + 60_000))
	valkeytest.Eventually(t, 30*time.Second, "second promoted at its due time", func() bool { return promotedAt(second) != "" })
	if got, want := promotedAt(second), strconv.FormatInt(serverNow+60_000, 10); got != want {
		t.Fatalf("second promoted at %s, want %s", got, want)
	}
	if promotedAt(first) != "" {
		t.Fatal("first promoted before its due time")
	}

	clock.AdvanceTo(wakeAt(serverNow + 120_000))
	valkeytest.Eventually(t, 30*time.Second, "first promoted at its due time", func() bool { return promotedAt(first) != "" })
	if got, want := promotedAt(first), strconv.FormatInt(serverNow+120_000, 10); got != want {
		t.Fatalf("first promoted at %s, want %s", got, want)
	}
	if elapsed := clock.Now().Sub(start); elapsed >= interval {
		t.Fatalf("the clock moved %s, past the poll interval", elapsed)
	}
}

// sweepCounter is an Observer counting sweep events per plugin.
type sweepCounter struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (s *sweepCounter) SweepDone(ev host.SweepEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]uint64{}
	}
	s.n[ev.Plugin]++
}

func (s *sweepCounter) count(plugin string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[plugin]
}

// TestTimerSweepEventsAreWholeSweeps: a plugin on due-time timers makes
// many passes per interval (here one per due execution); the Observer
// (the sweep-duration histogram) sees one event per sweep, as
// PluginStatus.Cycles counts them, not one per pass.
func TestTimerSweepEventsAreWholeSweeps(t *testing.T) {
	t.Parallel()
	ctx := valkeytest.Context(t, 2*time.Minute)
	c := valkeytest.Client(t)
	dir := t.TempDir()
	copyFile(t, fixture(t, "delayed_promoter"), filepath.Join(dir, "delayed_promoter.wasm"))
	obs := &sweepCounter{}
	logs := &logBuffer{}
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir, Backend: c, Observer: obs,
		Partitions: model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2},
		Plugins:    map[string]host.PluginConfig{"delayed_promoter": {Interval: time.Second}},
		Logger:     slog.New(slog.NewTextHandler(logs, nil)),
		Leases:     partlease.Config{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	<-h.Started()
	now, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []model.ExecutionID
	for i := range 12 {
		id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(i % 4)}, model.NewUUID())
		if _, err := c.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: "default",
			ExecutionKind: "k", DelayUntil: now + 300 + int64(i)*150}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		valkeytest.Eventually(t, 30*time.Second, string(id)+" promoted", func() bool {
			core, err := c.ExecutionCore(ctx, id)
			return err == nil && core["eligibility_state"] == "eligible_now"
		})
	}
	cycles := func() uint64 { st, _ := h.Plugin("delayed_promoter"); return st.Cycles }
	valkeytest.Eventually(t, 30*time.Second, "three sweeps", func() bool { return cycles() >= 3 })
	c1 := cycles()
	events := obs.count("delayed_promoter")
	c2 := cycles()
	// Each sweep is reported when the next one starts.
	if events+1 < c1 || events > c2 {
		t.Errorf("%d sweep events for %d..%d sweeps", events, c1, c2)
	}
	logs.mu.Lock()
	passes := uint64(strings.Count(logs.b.String(), `msg="scan cycle complete" plugin=delayed_promoter`))
	logs.mu.Unlock()
	if passes <= c2 {
		t.Fatalf("only %d acting passes in %d sweeps: the test did not make several passes per sweep", passes, c2)
	}
	t.Logf("%d sweeps, %d sweep events, %d acting passes", c2, events, passes)
}
