package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// pgReconciler is the scanner that resolves flow edges on Postgres.
const pgReconciler = "pg_dependency_reconciler"

// pgDAG is scenario 3's run on Postgres: one latency (ms) per edge, the
// floor (one SELECT 1 round trip, p50, ms) and where the time went.
type pgDAG struct {
	lat     []float64
	floor   float64
	summary string
}

// dagPostgres runs scenario 3's flows on a fresh database of the
// throwaway cluster with fabric's flow engine on Postgres (pgEngine),
// observing each child's eligibility by LISTEN fabric_eligible.
func dagPostgres(ctx context.Context, e *benchEnv) (*pgDAG, error) {
	url, err := e.migratedPostgresURL(ctx)
	if err != nil {
		return nil, err
	}
	pc, err := postgres.Connect(ctx, postgres.ClientConfig{URL: url, MaxConns: 16, Logger: e.log})
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	events, stopWatch, err := watchPGEligible(ctx, url, e.log)
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	eng, err := startPGEngine(ctx, e, pc)
	if err != nil {
		return nil, err
	}
	defer eng.stop()
	st := &pgDAGStages{}
	lat, err := dagFlows(ctx, e, dagTarget{provider: pc, events: events,
		eligible: func(ctx context.Context, ev keyEvent, child model.ExecutionID) bool {
			if ev.key != pgEligiblePayload(child) {
				return false
			}
			f, err := pc.ExecutionFields(ctx, child)
			return err == nil && f["lifecycle_phase"] == "runnable" && f["eligibility_state"] == "eligible_now"
		},
		level: st.level,
	})
	if err != nil {
		return nil, err
	}
	floor, err := pgRoundTrip(ctx, pc, 200)
	if err != nil {
		return nil, err
	}
	return &pgDAG{lat: lat, floor: floor, summary: st.summary(eng.woken(), eng.h.Records(pgReconciler), int(pc.Partitions().Flow))}, nil
}

// pgEligiblePayload is the fabric_eligible payload naming child's
// partition and the bench lane.
func pgEligiblePayload(child model.ExecutionID) string {
	return strconv.Itoa(int(child.Partition().Index)) + ":" + benchLane
}

// pgEngine is fabric's flow engine on Postgres as `fabric run --backend
// postgres` runs it: a host on the database with pg_dependency_reconciler
// (stale_ms 0: the host is the dispatcher; its own sweep stays the safety
// net, every postgres.DependencySafetyInterval), swept at once on a flow's
// partition when LISTEN fabric_completion reports a flow member's
// completion event
// (postgres.Client.CompletionWakeups → host.CompletionConfig.Wakeups).
// The bench relays the wake-ups to the host to date each one.
type pgEngine struct {
	h    *host.Host
	stop func()

	mu    sync.Mutex
	wakes []time.Time
}

// woken returns when every wake-up reached the relay.
func (g *pgEngine) woken() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.wakes)
}

// startPGEngine starts the engine on pc and returns once the reconciler
// runs.
func startPGEngine(ctx context.Context, e *benchEnv, pc *postgres.Client) (*pgEngine, error) {
	dir, err := e.stockPluginDir(ctx, pgReconciler)
	if err != nil {
		return nil, err
	}
	in, stopWake, err := pc.CompletionWakeups(ctx)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	g := &pgEngine{}
	relay := make(chan model.Partition, cap(in))
	quit, relayed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(relayed)
		defer close(relay)
		for p := range in {
			at := time.Now()
			g.mu.Lock()
			g.wakes = append(g.wakes, at)
			g.mu.Unlock()
			select {
			case relay <- p:
			case <-quit: // the host stopped reading
				return
			}
		}
	}()
	endWake := func() { close(quit); stopWake(); <-relayed; os.RemoveAll(dir) }
	g.h, err = e.startHost(ctx, dir, nil, hostOpts{pg: pc, records: 1 << 16,
		plugins:     map[string]host.PluginConfig{pgReconciler: {Interval: postgres.DependencySafetyInterval, Config: map[string]string{"stale_ms": "0"}}},
		completions: host.CompletionConfig{Enabled: true, Wakeups: relay}})
	if err != nil {
		endWake()
		return nil, err
	}
	g.stop = func() { stopHost(g.h); endWake() }
	if !waitFor(ctx, 10*time.Second, time.Millisecond, func() bool {
		st, ok := g.h.Plugin(pgReconciler)
		return ok && st.State == host.StateRunning
	}) {
		g.stop()
		return nil, fmt.Errorf("%s never ran", pgReconciler)
	}
	return g, nil
}

// watchPGEligible LISTENs on fabric_eligible (postgres.EligibleChannel)
// over a dedicated connection to url and returns every notification, its
// payload ("<partition>:<lane>") as the key, dated on arrival. LISTEN is
// registered when it returns; stop ends the watch. A lost connection ends
// it too (logged): the wait for the next child then times out.
func watchPGEligible(ctx context.Context, url string, log *slog.Logger) (<-chan keyEvent, func(), error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", postgres.EligibleChannel, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+postgres.EligibleChannel); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("listen %s: %w", postgres.EligibleChannel, err)
	}
	events := make(chan keyEvent, 1024)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(wctx)
			if err != nil {
				if wctx.Err() == nil {
					log.Error("eligible watch: connection lost", "channel", postgres.EligibleChannel, "error", err)
				}
				return
			}
			select {
			case events <- keyEvent{key: n.Payload, at: time.Now()}:
			case <-wctx.Done():
				return
			}
		}
	}()
	return events, func() { cancel(); <-done; conn.Close(context.Background()) }, nil
}

// pgRoundTrip is the p50 (ms) of n lockstep SELECT 1 round trips on one
// connection of pc's pool.
func pgRoundTrip(ctx context.Context, pc *postgres.Client, n int) (float64, error) {
	conn, err := pc.Pool().Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	ms := make([]float64, 0, n)
	for range n {
		start := time.Now()
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			return 0, fmt.Errorf("SELECT 1: %w", err)
		}
		ms = append(ms, float64(time.Since(start).Microseconds())/1000)
	}
	p50, _, _ := percentiles(ms)
	return p50, nil
}

// pgDAGStages keeps every level of the Postgres run to break its latency
// down with the relay's wake-ups and the reconciler's call records.
type pgDAGStages struct {
	mu     sync.Mutex
	levels []pgLevel
}

// pgLevel is one level: its complete call started at start and returned
// at done, its child (on partition part) was notified eligible at at.
type pgLevel struct {
	start, done, at time.Time
	part            int
}

func (d *pgDAGStages) level(start, done, at time.Time, child model.ExecutionID) {
	d.mu.Lock()
	d.levels = append(d.levels, pgLevel{start: start, done: done, at: at, part: int(child.Partition().Index)})
	d.mu.Unlock()
}

// summary is the per-stage p50 / p99 over the levels whose wake-up and
// acting reconciler call fell between the level's complete call and its
// notification.
func (d *pgDAGStages) summary(wakes []time.Time, recs []host.CycleRecord, flowPartitions int) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := []string{"complete", "listen", "handoff", "release", "call"}
	ms := map[string][]float64{}
	add := func(name string, x time.Duration) { ms[name] = append(ms[name], float64(x.Microseconds())/1000) }
	matched, pushed := 0, 0
	for _, lv := range d.levels {
		in := func(t time.Time) bool { return !t.Before(lv.start) && !t.After(lv.at) }
		w := slices.IndexFunc(wakes, in)
		r := slices.IndexFunc(recs, func(r host.CycleRecord) bool {
			return r.Partition == lv.part && r.Result.Acted > 0 && in(r.Start)
		})
		if w < 0 || r < 0 {
			continue
		}
		matched++
		rec := recs[r]
		if rec.Cycle == 0 {
			pushed++
		}
		add("complete", lv.done.Sub(lv.start))
		add("listen", wakes[w].Sub(lv.done))
		add("handoff", rec.Start.Sub(wakes[w]))
		add("release", lv.at.Sub(rec.Start))
		add("call", rec.End.Sub(rec.Start))
	}
	if matched == 0 {
		return "no wake-up and acting reconciler call were matched to a level"
	}
	var parts []string
	for _, n := range names {
		p50, p99, _ := percentiles(ms[n])
		parts = append(parts, fmt.Sprintf("%s %s / %s", n, fmtNum(p50, "ms"), fmtNum(p99, "ms")))
	}
	return fmt.Sprintf("per-stage p50 / p99 over %d of %d levels, %d of them dispatched by a wake-up sweep, the rest by the reconciler's own safety sweep (every postgres.DependencySafetyInterval, 10 s, since 2026-12-02; 1 s before) (complete = the worker's complete call, listen = its return → the flow's partition relayed from LISTEN fabric_completion (the NOTIFY, whose payload names the partition; negative when the relay overtook the call's return), handoff = → the reconciler's call on the partition started, release = → the child's fabric_eligible NOTIFY arrived (the plugin's scan, claim and release statements and their commit), call = the whole reconciler call, for reference): %s. %s",
		matched, len(d.levels), pushed, strings.Join(parts, "; "), d.sweepOverlap(recs, flowPartitions))
}

// sweepOverlap compares the levels that ran while the reconciler's own
// sweep of the n flow partitions was in progress with the others.
func (d *pgDAGStages) sweepOverlap(recs []host.CycleRecord, n int) string {
	type span struct{ start, end time.Time }
	sweeps := map[uint64]*span{}
	for _, r := range recs {
		if r.Cycle == 0 { // a wake-up sweep of one partition
			continue
		}
		if sp := sweeps[r.Cycle]; sp == nil {
			sweeps[r.Cycle] = &span{r.Start, r.End}
		} else {
			sp.start, sp.end = minTime(sp.start, r.Start), maxTime(sp.end, r.End)
		}
	}
	var spans []float64
	for _, sp := range sweeps {
		spans = append(spans, float64(sp.end.Sub(sp.start).Microseconds())/1000)
	}
	var during, others []float64
	for _, lv := range d.levels {
		ms := float64(lv.at.Sub(lv.start).Microseconds()) / 1000
		if slices.ContainsFunc(recs, func(r host.CycleRecord) bool {
			return r.Cycle != 0 && r.Start.Before(lv.at) && r.End.After(lv.start)
		}) {
			during = append(during, ms)
		} else {
			others = append(others, ms)
		}
	}
	s50, _, smx := percentiles(spans)
	d50, d99, _ := percentiles(during)
	o50, o99, _ := percentiles(others)
	return fmt.Sprintf("The reconciler's own sweeps of the %d flow partitions (%d in the run, one every safety interval) took %s each (p50; max %s); the %d levels that overlapped one took %s / %s (p50 / p99), the other %d %s / %s",
		n, len(spans), fmtNum(s50, "ms"), fmtNum(smx, "ms"), len(during), fmtNum(d50, "ms"), fmtNum(d99, "ms"), len(others), fmtNum(o50, "ms"), fmtNum(o99, "ms"))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
