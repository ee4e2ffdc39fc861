package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// sweepTimes collects the sweep durations of one plugin.
type sweepTimes struct {
	plugin string
	mu     sync.Mutex
	ms     []float64
}

func (s *sweepTimes) SweepDone(ev host.SweepEvent) {
	if ev.Plugin != s.plugin {
		return
	}
	s.mu.Lock()
	s.ms = append(s.ms, float64(ev.Duration.Microseconds())/1000)
	s.mu.Unlock()
}

// take returns the durations collected since the last take.
func (s *sweepTimes) take() []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.ms
	s.ms = nil
	return out
}

// runShadowCost measures what a shadow costs the live plugin's cycle:
// delayed_promoter sweeps every partition (timers off) every 100 ms,
// first alone, then with a shadow of itself, the same number of sweeps
// each, each phase with the same workload of delayed executions falling
// due across the partitions. The figure is the live sweep's duration
// with the shadow against without it.
func runShadowCost(ctx context.Context, e *benchEnv, sc *Scenario) error {
	f, err := e.pluginFile("delayed_promoter")
	if err != nil {
		return err
	}
	if err := e.prewarm(ctx, f); err != nil {
		return err
	}
	vc, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer vc.Close()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{"default"}}); err != nil {
		return err
	}
	dir, err := pluginDir(f)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cand := filepath.Join(dir, "candidate.wasm.copy")
	if err := copyFile(f, cand); err != nil {
		return err
	}
	times := &sweepTimes{plugin: "delayed_promoter"}
	h, err := e.startHost(ctx, dir, vc, hostOpts{timers: host.TimerConfig{Disabled: true}, observer: times,
		plugins: map[string]host.PluginConfig{"delayed_promoter": {Interval: 100 * time.Millisecond}}})
	if err != nil {
		return err
	}
	defer stopHost(h)
	parts := int(model.DefaultPartitionConfig().Flow)
	sweeps := max(5, 3*e.size.ScanCycles)
	jobs := max(16, e.size.PromoteJobs/40)
	cycles := func() uint64 { st, _ := h.Plugin("delayed_promoter"); return st.Cycles }
	phase := func() ([]float64, error) {
		now, err := vc.ServerTime(ctx)
		if err != nil {
			return nil, err
		}
		for i := 0; i < jobs; i++ {
			id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(i % parts)}, model.NewUUID())
			if _, err := vc.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: id, Namespace: "bench", LaneID: "default",
				ExecutionKind: "shadow", DelayUntil: now + 300 + int64(i%20)*25}); err != nil {
				return nil, err
			}
		}
		times.take()
		from := cycles()
		if !waitFor(ctx, e.size.RunCap, 5*time.Millisecond, func() bool { return cycles() > from+uint64(sweeps) }) {
			return nil, fmt.Errorf("delayed_promoter made %d of %d sweeps within %s", cycles()-from, sweeps, e.size.RunCap)
		}
		return times.take(), nil
	}
	if !waitFor(ctx, 20*time.Second, 5*time.Millisecond, func() bool { return cycles() > 2 }) {
		return fmt.Errorf("delayed_promoter is not sweeping")
	}
	alone, err := phase()
	if err != nil {
		return err
	}
	if _, err := h.LoadShadow(ctx, cand); err != nil {
		return err
	}
	with, err := phase()
	if err != nil {
		return err
	}
	d, err := h.ShadowDiff("delayed_promoter")
	if err != nil {
		return err
	}
	a50, a99, _ := percentiles(alone)
	w50, w99, _ := percentiles(with)
	sc.Size = fmt.Sprintf("delayed_promoter on %d partitions every 100 ms, %d sweeps alone then %d with a shadow of itself, %d delayed executions falling due in each phase", parts, len(alone), len(with), jobs)
	sc.Rows = append(sc.Rows,
		Row{Measure: "live sweep with a shadow, p50", Fabric: w50, Versus: "the same sweep without a shadow, p50", Peer: a50, Unit: "ms",
			Note: "ratio < 1: the shadow's share of the live cycle (it runs before each live call, in that call's turn)"},
		Row{Measure: "live sweep with a shadow, p99", Fabric: w99, Versus: "the same sweep without a shadow, p99", Peer: a99, Unit: "ms"},
		Row{Measure: "shadow actions agreeing", Fabric: 100 * d.AgreeRatio(), Versus: "", Peer: nan(), Unit: "%", Goal: "100 %",
			Note: fmt.Sprintf("%d actions agree, %d disagree over %d compared calls; %d writes recorded, none sent", d.Agree, d.Disagree, d.Calls, d.DryRuns)},
	)
	sc.Notes = append(sc.Notes, "A shadow is a candidate version run beside the live one with its writes recorded, not sent (fabric plugins shadow). No other job engine rehearses maintenance logic against live state: the comparison is the same host without it.")
	return nil
}
