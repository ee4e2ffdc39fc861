package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"
)

// noopLibrary is a tiny separate library for scenario 8, never loaded into
// flowfabric: one function that returns 1 and touches nothing.
const noopLibrary = "#!lua name=fabricbench\nredis.register_function('fabricbench_noop', function(keys, args) return 1 end)\n"

// runLimit measures what the server can do with an FCALL that does
// nothing: one client in lockstep, 50 concurrent callers (valkey-go
// pipelines concurrent calls on its shared connection, as fabric's
// clients do) and explicit ×16 pipelines; PING beside each for the
// per-call cost of Functions themselves.
func runLimit(ctx context.Context, e *benchEnv, sc *Scenario) error {
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	raw := c.Raw()
	if err := raw.Do(ctx, raw.B().FunctionLoad().Replace().FunctionCode(noopLibrary).Build()).Error(); err != nil {
		return fmt.Errorf("load fabricbench library: %w", err)
	}
	defer raw.Do(context.WithoutCancel(ctx), raw.B().FunctionDelete().LibraryName("fabricbench").Build())
	fcall := func() vk.Completed { return raw.B().Fcall().Function("fabricbench_noop").Numkeys(0).Build() }
	ping := func() vk.Completed { return raw.B().Ping().Build() }
	d := e.size.LimitFor
	sc.Size = fmt.Sprintf("%s per variant", d)

	type variant struct {
		name     string
		callers  int
		pipeline int
		goal     string
	}
	var best float64
	for _, v := range []variant{
		{name: "1 caller, lockstep (round-trip bound)", callers: 1, pipeline: 1},
		{name: "50 concurrent callers (auto-pipelined)", callers: 50, pipeline: 1},
		{name: "4 callers × pipeline 16", callers: 4, pipeline: 16},
	} {
		f, err := callRate(ctx, raw, fcall, v.callers, v.pipeline, d)
		if err != nil {
			return err
		}
		p, err := callRate(ctx, raw, ping, v.callers, v.pipeline, d)
		if err != nil {
			return err
		}
		best = max(best, f)
		if v.callers == 1 && v.pipeline == 1 {
			e.lockstep = f
		}
		sc.Rows = append(sc.Rows, Row{Measure: "FCALL no-op, " + v.name, Fabric: f, Versus: "PING", Peer: p, Unit: "/s", HigherIsBetter: true})
	}
	e.limit = best
	for i := range sc.Rows {
		sc.Rows[i].OfLimit = sc.Rows[i].Fabric / best
	}
	sc.Notes = append(sc.Notes, fmt.Sprintf("The limit every other scenario is shown against: %s no-op FCALLs/s (the best FCALL variant).", fmtNum(best, "")),
		"Client and server share the same cores, as every scenario here does.")
	return nil
}

// callRate issues cmd from callers goroutines, pipeline commands per
// round trip, for d, and returns commands per second.
func callRate(ctx context.Context, raw vk.Client, cmd func() vk.Completed, callers, pipeline int, d time.Duration) (float64, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmds := make(vk.Commands, pipeline)
			for time.Now().Before(stop) && ctx.Err() == nil {
				if pipeline == 1 {
					if err := raw.Do(ctx, cmd()).Error(); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					n.Add(1)
					continue
				}
				for j := range cmds {
					cmds[j] = cmd()
				}
				for _, r := range raw.DoMulti(ctx, cmds...) {
					if err := r.Error(); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
				n.Add(int64(pipeline))
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}
