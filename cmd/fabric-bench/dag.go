package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// startEngine starts fabric's flow engine on vc: a host with the
// completion listener on and the dependency dispatcher plugin loaded. It
// returns once the listener is subscribed to ff:dag:completions.
func startEngine(ctx context.Context, e *benchEnv, vc *valkey.Client) (stop func(), err error) {
	f, err := e.pluginFile("dependency")
	if err != nil {
		return nil, err
	}
	if err := e.prewarm(ctx, f); err != nil {
		return nil, err
	}
	dir, err := pluginDir(f)
	if err != nil {
		return nil, err
	}
	h, err := e.startHost(ctx, dir, vc, hostOpts{completions: host.CompletionConfig{Enabled: true}})
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
// resolving it itself after completing (WorkerConfig.ResolveDependencies).
// The floor beside them is one lockstep FCALL round trip (scenario 8).
func runDAG(ctx context.Context, e *benchEnv, sc *Scenario) error {
	sc.Size = fmt.Sprintf("%d flows × %d levels, one level at a time", e.size.DAGFlows, e.size.DAGLevels)
	floor := nan()
	if e.lockstep > 0 {
		floor = 1000 / e.lockstep
	}
	{
		lat, err := dagLatency(ctx, e, false)
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		p50, p99, mx := percentiles(lat)
		sc.Rows = append(sc.Rows,
			Row{Measure: "engine: complete → child eligible, p50", Fabric: p50, Versus: "one lockstep FCALL round trip", Peer: floor, Unit: "ms", Goal: "≤ 2 ms/level"},
			Row{Measure: "engine: complete → child eligible, p99", Fabric: p99, Versus: "one lockstep FCALL round trip", Peer: floor, Unit: "ms", Goal: "≤ 2 ms/level",
				Note: fmt.Sprintf("max %s over %d levels", fmtNum(mx, "ms"), len(lat))})
	}
	lat, err := dagLatency(ctx, e, true)
	if err != nil {
		return fmt.Errorf("inline: %w", err)
	}
	p50, p99, mx := percentiles(lat)
	sc.Rows = append(sc.Rows,
		Row{Measure: "worker-side resolution: complete → child eligible, p50", Fabric: p50, Versus: "one lockstep FCALL round trip", Peer: floor, Unit: "ms"},
		Row{Measure: "worker-side resolution: complete → child eligible, p99", Fabric: p99, Versus: "one lockstep FCALL round trip", Peer: floor, Unit: "ms",
			Note: fmt.Sprintf("max %s over %d levels", fmtNum(mx, "ms"), len(lat))})
	sc.Notes = append(sc.Notes, "asynq and River (OSS) have no DAG of jobs, so the comparison is the physical floor: one no-op FCALL round trip in lockstep.",
		"Latency runs from the start of the worker's complete call (ff_complete_execution) to the child's ZADD into its eligible index, polled every 100 µs.")
	return nil
}

// dagLatency runs the flows and returns one latency (ms) per edge.
func dagLatency(ctx context.Context, e *benchEnv, inline bool) ([]float64, error) {
	vc, err := e.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer vc.Close()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
		return nil, err
	}
	if !inline {
		stop, err := startEngine(ctx, e, vc)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: e.log})
	if err != nil {
		return nil, err
	}
	w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "bench-dag", Lanes: []string{benchLane}, ResolveDependencies: inline, Logger: e.log})
	if err != nil {
		return nil, err
	}
	defer w.Close(context.Background())
	raw := vc.Raw()
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
			start := time.Now()
			if err := l.Complete(ctx, nil); err != nil {
				return nil, err
			}
			if i == len(ids)-1 {
				break
			}
			child := ids[i+1]
			key := model.KeysOn(child.Partition()).LaneEligible(benchLane)
			ok := waitFor(ctx, 10*time.Second, 100*time.Microsecond, func() bool {
				return raw.Do(ctx, raw.B().Zscore().Key(key).Member(string(child)).Build()).Error() == nil
			})
			if !ok {
				return nil, fmt.Errorf("flow %d level %d: child never became eligible", f, i+1)
			}
			lat = append(lat, float64(time.Since(start).Microseconds())/1000)
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
