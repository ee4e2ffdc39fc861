package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// startEngine starts fabric's flow engine on vc: a host with the
// completion listener on and the dependency dispatcher plugin loaded. It
// returns once the listener is subscribed to ff:dag:completions.
func startEngine(ctx context.Context, e *benchEnv, vc *valkey.Client, obs host.Observer) (stop func(), err error) {
	dir, err := e.stockPluginDir(ctx, "dependency")
	if err != nil {
		return nil, err
	}
	h, err := e.startHost(ctx, dir, vc, hostOpts{completions: host.CompletionConfig{Enabled: true}, observer: obs})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop = func() { stopHost(h); os.RemoveAll(dir) }
	raw := e.stats.Raw()
	if !waitFor(ctx, 10*time.Second, time.Millisecond, func() bool {
		m, err := raw.Do(ctx, raw.B().PubsubNumsub().Channel(completionsChannel).Build()).AsIntMap()
		return err == nil && m[completionsChannel] > 0
	}) {
		stop()
		return nil, fmt.Errorf("completion listener never subscribed to %s", completionsChannel)
	}
	return stop, nil
}

// completionsChannel is where ff_* functions publish flow completions.
const completionsChannel = "ff:dag:completions"

// runDAG measures per-level latency of 10-level linear flows: for each
// level the bench claims the member, completes it, and times the
// complete call's start to its child appearing in the child's partition
// eligible index. Modes: fabric's flow engine (completion listener +
// dependency dispatcher plugin) resolving the edge, and the SDK worker
// resolving it itself after completing (WorkerConfig.ResolveDependencies),
// then the engine on Postgres (dagPostgres). The floor beside them is one
// lockstep FCALL round trip (scenario 8), on Postgres one SELECT 1.
func runDAG(ctx context.Context, e *benchEnv, sc *Scenario) error {
	sc.Size = fmt.Sprintf("%d flows × %d levels, one level at a time", e.size.DAGFlows, e.size.DAGLevels)
	floor := nan()
	if e.lockstep > 0 {
		floor = 1000 / e.lockstep
	}
	{
		lat, stages, err := dagLatency(ctx, e, false)
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		sc.Notes = append(sc.Notes, "engine: "+stages.summary()+".")
		p50, p99, mx := percentiles(lat)
		sc.Rows = append(sc.Rows,
			Row{Measure: "engine: complete → child eligible, p50", Fabric: p50, Versus: "one lockstep FCALL round trip", Peer: floor, Unit: "ms", Goal: "≤ 2 ms/level"},
			Row{Measure: "engine: complete → child eligible, p99", Fabric: p99, Versus: "one lockstep FCALL round trip", Peer: floor, Unit: "ms", Goal: "≤ 2 ms/level",
				Note: fmt.Sprintf("max %s over %d levels", fmtNum(mx, "ms"), len(lat))})
	}
	lat, _, err := dagLatency(ctx, e, true)
	if err != nil {
		return fmt.Errorf("inline: %w", err)
	}
	p50, p99, mx := percentiles(lat)
	sc.Rows = append(sc.Rows,
		Row{Measure: "worker-side resolution: complete → child eligible, p50", Fabric: p50, Versus: "one lockstep FCALL round trip", Peer: floor, Unit: "ms"},
		Row{Measure: "worker-side resolution: complete → child eligible, p99", Fabric: p99, Versus: "one lockstep FCALL round trip", Peer: floor, Unit: "ms",
			Note: fmt.Sprintf("max %s over %d levels", fmtNum(mx, "ms"), len(lat))})
	sc.Notes = append(sc.Notes, "asynq and River (OSS) have no DAG of jobs, so the comparison is the physical floor: one no-op FCALL round trip in lockstep (on Postgres one SELECT 1 round trip in lockstep, p50 of 200).",
		"Latency runs from the start of the worker's complete call (ff_complete_execution) to the arrival of the keyspace notification of the child's ZADD into its eligible index (notify-keyspace-events on for the scenario; until 2026-11-27 the index was polled every 100 µs, which added half a poll period and a round trip on average, and more under load).")
	pg, err := dagPostgres(ctx, e)
	if err != nil {
		return fmt.Errorf("postgres engine: %w", err)
	}
	p50, p99, mx = percentiles(pg.lat)
	sc.Rows = append(sc.Rows,
		Row{Measure: "Postgres engine: complete → child eligible, p50", Fabric: p50, Versus: "one lockstep SELECT 1 round trip", Peer: pg.floor, Unit: "ms", Goal: "≤ 2 ms/level"},
		Row{Measure: "Postgres engine: complete → child eligible, p99", Fabric: p99, Versus: "one lockstep SELECT 1 round trip", Peer: pg.floor, Unit: "ms", Goal: "≤ 2 ms/level",
			Note: fmt.Sprintf("max %s over %d levels", fmtNum(mx, "ms"), len(pg.lat))})
	sc.Notes = append(sc.Notes,
		"Postgres engine: the same flows on a fresh database of the throwaway cluster (fsync and synchronous_commit off), driven by `fabric run --backend postgres`'s engine: a host with pg_dependency_reconciler (stale_ms 0; its own sweep stays the safety net, every postgres.DependencySafetyInterval = 10 s as `fabric run --backend postgres` sets it — 1 s, the stock interval, until 2026-12-02), swept at once on the flow's partition when LISTEN fabric_completion reports a flow member's completion event (fabric's own trigger, its payload naming the partition, so no query; until 2026-12-02 LISTEN ff_completion and a catch-up SELECT over all 256 partitions per notification) (postgres.Client.CompletionWakeups → host.CompletionConfig.Wakeups; the bench relays the wake-ups to date them). Latency runs from the start of the worker's complete call to the arrival, on the bench's own connection LISTENing on fabric_eligible, of the NOTIFY the trigger sends when the child's row becomes runnable and eligible_now — delivered at the commit of the reconciler's releasing transaction; a read of the child's state after the arrival confirms it and does not count. Nothing is polled. There is no worker-side row on Postgres: a worker there does not resolve its members' edges (postgres.Claimer.ResolveDependencies is a no-op), the host does.",
		"Postgres engine: "+pg.summary+".")
	return nil
}

// dagLatency runs the flows on Valkey and returns one latency (ms) per
// edge, and with the engine where each went.
func dagLatency(ctx context.Context, e *benchEnv, inline bool) ([]float64, *dagStages, error) {
	stages := &dagStages{}
	lat, err := dagLevels(ctx, e, inline, stages)
	return lat, stages, err
}

// dagLevels is dagLatency's run; stages receives every level's times.
func dagLevels(ctx context.Context, e *benchEnv, inline bool, stages *dagStages) ([]float64, error) {
	db := e.freshDB()
	vc, err := e.dialDB(ctx, db)
	if err != nil {
		return nil, err
	}
	defer vc.Close()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
		return nil, err
	}
	raw := vc.Raw()
	eligible, stopWatch, err := watchEligible(ctx, e, db, raw)
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	if !inline {
		stop, err := startEngine(ctx, e, vc, stages)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	return dagFlows(ctx, e, dagTarget{provider: vc, inline: inline, events: eligible,
		eligible: func(ctx context.Context, ev keyEvent, child model.ExecutionID) bool {
			key := model.KeysOn(child.Partition()).LaneEligible(benchLane)
			return ev.key == key && raw.Do(ctx, raw.B().Zscore().Key(key).Member(string(child)).Build()).Error() == nil
		},
		level: func(start, _, at time.Time, _ model.ExecutionID) { stages.level(start, at) },
	})
}

// dagTarget is what dagFlows runs on: a backend, how it sees a child
// become eligible, and who is told of each level.
type dagTarget struct {
	provider backend.Provider
	// inline makes the worker resolve its members' edges itself
	// (WorkerConfig.ResolveDependencies).
	inline bool
	// events are the eligibility notifications, each dated on arrival.
	events <-chan keyEvent
	// eligible reports whether ev is child's becoming eligible (a check
	// made after ev arrived: its round trip does not count).
	eligible func(ctx context.Context, ev keyEvent, child model.ExecutionID) bool
	// level, when set, receives every level: its complete call started at
	// start and returned at done, child's notification arrived at at.
	level func(start, done, at time.Time, child model.ExecutionID)
}

// dagFlows runs e.size.DAGFlows linear flows of e.size.DAGLevels members
// on t, one level at a time, and returns one latency (ms) per edge: the
// complete call's start to the arrival of the child's eligibility
// notification.
func dagFlows(ctx context.Context, e *benchEnv, t dagTarget) ([]float64, error) {
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: t.provider, Logger: e.log})
	if err != nil {
		return nil, err
	}
	w, err := sdk.Connect(ctx, t.provider, sdk.WorkerConfig{WorkerID: "bench-dag", Lanes: []string{benchLane}, ResolveDependencies: t.inline, Logger: e.log})
	if err != nil {
		return nil, err
	}
	defer w.Close(context.Background())
	var lat []float64
	for f := 0; f < e.size.DAGFlows; f++ {
		flow, err := cl.CreateFlow(ctx, "bench")
		if err != nil {
			return nil, err
		}
		ids := make([]model.ExecutionID, e.size.DAGLevels)
		for i := range ids {
			var after []model.ExecutionID
			if i > 0 {
				after = []model.ExecutionID{ids[i-1]}
			}
			if ids[i], err = flow.Add(ctx, sdk.ExecutionSpec{Lane: benchLane, Payload: []byte("x")}, after...); err != nil {
				return nil, err
			}
		}
		for i, id := range ids {
			l, err := claimExact(ctx, w, id)
			if err != nil {
				return nil, fmt.Errorf("flow %d level %d: %w", f, i, err)
			}
			drain(t.events)
			start := time.Now()
			if err := l.Complete(ctx, nil); err != nil {
				return nil, err
			}
			done := time.Now()
			if i == len(ids)-1 {
				break
			}
			child := ids[i+1]
			at, err := eligibleAt(ctx, t, child)
			if err != nil {
				return nil, fmt.Errorf("flow %d level %d: %w", f, i+1, err)
			}
			lat = append(lat, float64(at.Sub(start).Microseconds())/1000)
			if t.level != nil {
				t.level(start, done, at, child)
			}
		}
	}
	return lat, nil
}

// claimExact claims until it holds id (the only eligible execution).
func claimExact(ctx context.Context, w *sdk.Worker, id model.ExecutionID) (*sdk.Lease, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l, err := w.ClaimNext(ctx)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue
		}
		if l.ID != id {
			_ = l.Complete(ctx, nil)
			return nil, fmt.Errorf("claimed %s, expected %s", l.ID, id)
		}
		return l, nil
	}
	return nil, errors.New("nothing claimable within 10s")
}

// eligibleProbe is a key of the eligible indexes' shape that
// watchEligible adds to, to know its subscription is live.
const eligibleProbe = "fabric-bench:probe:eligible"

// watchEligible turns on keyspace notifications of sorted-set commands
// on the bench server and returns the ZADDs into db's eligible indexes
// as they arrive (stop ends the watch and turns the notifications off).
// It returns once a probe ZADD came through, so no ZADD after it is
// missed.
func watchEligible(ctx context.Context, e *benchEnv, db int, raw vk.Client) (<-chan keyEvent, func(), error) {
	events, stop, err := e.watchKeyspace(ctx, db, "Kz", "*:eligible", "zadd", 1024)
	if err != nil {
		return nil, nil, err
	}
	seen := false
	// A ZADD that changes nothing is not notified: each probe's score is
	// new.
	for n, deadline := 0, time.Now().Add(10*time.Second); !seen && time.Now().Before(deadline); n++ {
		if err := raw.Do(ctx, raw.B().Zadd().Key(eligibleProbe).ScoreMember().ScoreMember(float64(n), "probe").Build()).Error(); err != nil {
			stop()
			return nil, nil, err
		}
		select {
		case ev := <-events:
			seen = ev.key == eligibleProbe
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			stop()
			return nil, nil, ctx.Err()
		}
	}
	raw.Do(ctx, raw.B().Del().Key(eligibleProbe).Build())
	if !seen {
		stop()
		return nil, nil, errors.New("keyspace notifications of the eligible indexes never arrived")
	}
	return events, stop, nil
}

// drain empties events of what arrived so far.
func drain(events <-chan keyEvent) {
	for {
		select {
		case <-events:
		default:
			return
		}
	}
}

// eligibleAt waits for the notification that child became eligible and
// returns when it arrived: the first notification after which
// t.eligible holds.
func eligibleAt(ctx context.Context, t dagTarget, child model.ExecutionID) (time.Time, error) {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-t.events:
			if t.eligible(ctx, ev, child) {
				return ev.at, nil
			}
		case <-timeout:
			return time.Time{}, errors.New("child never became eligible")
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// dagStages is the engine's host Observer in scenario 3: it keeps every
// dependency dispatcher call (host.DispatchRecord) and every level's
// complete-call start and eligible notification, and matches them to
// break the latency down.
type dagStages struct {
	mu     sync.Mutex
	recs   []host.DispatchRecord
	levels [][2]time.Time // complete call started, child's ZADD notified
}

// SweepDone implements host.Observer.
func (d *dagStages) SweepDone(host.SweepEvent) {}

// DispatchDone implements host.DispatchObserver.
func (d *dagStages) DispatchDone(rec host.DispatchRecord) {
	d.mu.Lock()
	d.recs = append(d.recs, rec)
	d.mu.Unlock()
}

// level records one level: its complete call started at start, its
// child's ZADD was notified at at.
func (d *dagStages) level(start, at time.Time) {
	d.mu.Lock()
	d.levels = append(d.levels, [2]time.Time{start, at})
	d.mu.Unlock()
}

// summary is the per-stage p50 / p99 over the levels whose dispatcher
// call received its completion between the level's complete call and its
// notification.
func (d *dagStages) summary() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := []string{"publish", host.StageHandOff, host.StageCall, host.StageFCall, "notify"}
	ms := map[string][]float64{}
	add := func(name string, x time.Duration) { ms[name] = append(ms[name], float64(x.Microseconds())/1000) }
	matched := 0
	for _, lv := range d.levels {
		i := slices.IndexFunc(d.recs, func(r host.DispatchRecord) bool {
			return !r.Received.Before(lv[0]) && !r.Received.After(lv[1])
		})
		if i < 0 {
			continue
		}
		r := d.recs[i]
		matched++
		add("publish", r.Received.Sub(lv[0]))
		for _, st := range r.Stages() {
			add(st.Stage, st.Duration)
		}
		add("notify", lv[1].Sub(r.FCallDone))
	}
	if matched == 0 {
		return "no dispatcher call was matched to a level"
	}
	var parts []string
	for _, n := range names {
		p50, p99, _ := percentiles(ms[n])
		parts = append(parts, fmt.Sprintf("%s %s / %s", n, fmtNum(p50, "ms"), fmtNum(p99, "ms")))
	}
	return fmt.Sprintf("per-stage p50 / p99 over %d of %d levels (publish = complete call started → the host received the completion message, then host.DispatchRecord's handoff = → dispatcher call started, call = → its ff_resolve_dependency batch sent (instance, guest, its two read round trips), fcall = → replies in, notify = replies in → the child's ZADD notified to the bench, negative when the notification overtook the reply): %s",
		matched, len(d.levels), strings.Join(parts, "; "))
}
