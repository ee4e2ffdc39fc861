package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/sdk"
)

const benchLane = "bench"

// runValkeyE2E measures submit→claim→complete executions/s with W
// handlers: fabric's SDK (producers call CreateExecution, workers run
// Worker.Run), the raw minimum on the same client (producers LPUSH,
// workers BRPOP), and asynq on the same server (bench/peers).
func runValkeyE2E(ctx context.Context, e *benchEnv, sc *Scenario) error {
	n, cap := e.size.E2EJobs, e.size.RunCap
	sc.Size = fmt.Sprintf("%d jobs per run, %d producers, W ∈ %v, cap %s per run", n, e.size.Producers, e.size.Workers, cap)
	for _, w := range e.size.Workers {
		fab, fabCmds, err := fabricE2E(ctx, e, n, w)
		if err != nil {
			return fmt.Errorf("fabric W=%d: %w", w, err)
		}
		raw, rawCmds, err := rawE2E(ctx, e, n, w)
		if err != nil {
			return fmt.Errorf("raw W=%d: %w", w, err)
		}
		ops, opsCmds, err := opsE2E(ctx, e, n, w)
		if err != nil {
			return fmt.Errorf("ops W=%d: %w", w, err)
		}
		fabTotal, fabTop := topCommands(fabCmds, 4)
		rawTotal, _ := topCommands(rawCmds, 4)
		opsTotal, opsTop := topCommands(opsCmds, 4)
		sc.Rows = append(sc.Rows,
			Row{Measure: fmt.Sprintf("executions/s, W=%d", w), Fabric: fab.rate(), Versus: "raw LPUSH/BRPOP",
				Peer: raw.rate(), Unit: "/s", HigherIsBetter: true, OfLimit: fab.rate() / e.limitOr1(), Goal: "≥ 0.50× raw",
				Note: fmt.Sprintf("W=%d: fabric SDK %s server commands per execution (%s; commands run inside FCALLs included), raw %s%s",
					w, fmtNum(fabTotal, ""), fabTop, fmtNum(rawTotal, ""), fab.cappedNote()+raw.cappedNote())},
			Row{Measure: fmt.Sprintf("executions/s, W=%d, ff_* functions without the SDK worker", w), Fabric: ops.rate(), Versus: "raw LPUSH/BRPOP",
				Peer: raw.rate(), Unit: "/s", HigherIsBetter: true, OfLimit: ops.rate() / e.limitOr1(),
				Note: fmt.Sprintf("W=%d: the same job as direct calls (create; eligible head read; grant + claim pipelined; complete): %s commands per execution (%s)%s",
					w, fmtNum(opsTotal, ""), opsTop, ops.cappedNote())})
		sc.Rows = append(sc.Rows, Row{Measure: fmt.Sprintf("server CPU µs per execution, W=%d", w), Fabric: fab.cpuUs,
			Versus: "raw LPUSH/BRPOP", Peer: raw.cpuUs, Unit: "µs"})
		costs, fcallUs, err := fabricFCallCosts(ctx, e, max(n/4, 1), w)
		if err != nil {
			sc.Rows = append(sc.Rows, Row{Measure: fmt.Sprintf("FCALL µs per execution, W=%d", w), Missing: "SLOWLOG run failed: " + err.Error()})
		} else {
			sc.Rows = append(sc.Rows, Row{Measure: fmt.Sprintf("FCALL µs per execution, W=%d", w), Fabric: fcallUs, Peer: nan(), Unit: "µs",
				Note: fmt.Sprintf("W=%d, SLOWLOG at 0 µs over a separate run of %d executions (wall time inside the server: on a loaded machine it includes the server being descheduled, the CPU rows do not): %s", w, max(n/4, 1), fmtCosts(costs))})
		}
		db := e.freshDB()
		before, _ := e.commandCalls(ctx)
		acpu0, aerr0 := e.serverCPU(ctx)
		pr, err := e.peer(ctx, "asynq-e2e", "-socket", e.vsrv.Socket(), "-db", strconv.Itoa(db), "-jobs", strconv.Itoa(n),
			"-workers", strconv.Itoa(w), "-producers", strconv.Itoa(e.size.Producers), "-timeout", capArg(cap))
		if err != nil {
			sc.Rows = append(sc.Rows, Row{Measure: fmt.Sprintf("executions/s, W=%d", w), Versus: "asynq", Missing: "comparison failed: " + err.Error(), Goal: "≥ 2× asynq"})
			continue
		}
		after, _ := e.commandCalls(ctx)
		acpu1, aerr1 := e.serverCPU(ctx)
		asynqCPU := cpuPerJob(acpu0, acpu1, aerr0 == nil, aerr1 == nil, int64(pr.Jobs))
		asynqCmds := float64(after-before) / float64(max(pr.Jobs, 1))
		note := fmt.Sprintf("asynq %s: %s server commands per job", pr.Version, fmtNum(asynqCmds, ""))
		if pr.Capped {
			note += fmt.Sprintf("; asynq capped at %s after %d of %d jobs", cap, pr.Jobs, n)
		}
		sc.Rows = append(sc.Rows, Row{Measure: fmt.Sprintf("executions/s, W=%d", w), Fabric: fab.rate(), Versus: "asynq " + pr.Version,
			Peer: pr.PerSec, Unit: "/s", HigherIsBetter: true, OfLimit: fab.rate() / e.limitOr1(), Goal: "≥ 2× asynq", Note: note},
			Row{Measure: fmt.Sprintf("server CPU µs per execution, W=%d", w), Fabric: fab.cpuUs, Versus: "asynq " + pr.Version + " (per job)",
				Peer: asynqCPU, Unit: "µs", Goal: "≤ 1.5× asynq",
				Note: fmt.Sprintf("W=%d: INFO cpu, %s, sys+user delta over the run / executions; the raw queue's is in the row above", w, cpuLabel(fab.cpu))},
			Row{Measure: fmt.Sprintf("server commands per execution, W=%d", w), Fabric: fabTotal, Versus: "asynq " + pr.Version + " (per job)",
				Peer: asynqCmds, Unit: ""})
	}
	if err := runFloor(ctx, e, sc, max(n/4, 1)); err != nil {
		sc.Rows = append(sc.Rows, Row{Measure: "contract floor: server CPU µs per execution", Missing: "floor run failed: " + err.Error()})
	}
	sc.Notes = append(sc.Notes,
		"Every run: producers submit while the W handlers run; the clock runs from the first submit to the last handler call. Handlers do nothing.",
		"fabric: sdk.Client.CreateExecution + sdk.Worker.Run (W workers of concurrency 1, one lane, 256 flow partitions); raw: LPUSH + BRPOP through the same valkey-go client; asynq: Client.Enqueue + Server with Concurrency W, same redis-server, its own database.")
	return nil
}

// e2eResult is one throughput run.
type e2eResult struct {
	done    int64
	elapsed time.Duration
	capped  bool
	want    int
	// cpuUs is the server's CPU µs per execution over the run (INFO cpu,
	// main thread when available; NaN when not read); cpu the sample kind.
	cpuUs float64
	cpu   cpuSample
}

func (r e2eResult) rate() float64 { return float64(r.done) / r.elapsed.Seconds() }

func (r e2eResult) cappedNote() string {
	if !r.capped {
		return ""
	}
	return fmt.Sprintf("; capped after %d of %d", r.done, r.want)
}

func (e *benchEnv) limitOr1() float64 {
	if e.limit > 0 {
		return e.limit
	}
	return nan()
}

// commandCalls sums calls over INFO commandstats (server-wide).
func (e *benchEnv) commandCalls(ctx context.Context) (int64, error) {
	raw := e.stats.Raw()
	s, err := raw.Do(ctx, raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		num, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(num, 10, 64)
		total += v
	}
	return total, nil
}

// produce runs producers goroutines calling submit(i) for i in [0, n).
func produce(ctx context.Context, n, producers int, submit func(i int) error) error {
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < n && ctx.Err() == nil; i += producers {
				if err := submit(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func fabricE2E(ctx context.Context, e *benchEnv, n, workers int) (e2eResult, map[string]float64, error) {
	return fabricE2EWith(ctx, e, n, workers, notifyWorkers)
}

// notifyMode is how a fabric e2e run treats keyspace notifications.
type notifyMode int

const (
	// notifyWorkers: the SDK default; every worker turns the ZADD
	// keyevents on and subscribes to them.
	notifyWorkers notifyMode = iota
	// notifyUnheard: the keyevent flags on (as a fabric host sets them),
	// no worker subscribed (sdk.WorkerConfig.DisableNotifications).
	notifyUnheard
	// notifyOff: flags cleared, no worker subscribed.
	notifyOff
)

func (m notifyMode) String() string {
	switch m {
	case notifyUnheard:
		return "notifications on, no worker subscribed"
	case notifyOff:
		return "notifications off"
	}
	return "notifications on, workers subscribed (default)"
}

// fabricE2EWith is fabricE2E with the workers' eligible-work
// notifications as mode says.
func fabricE2EWith(ctx context.Context, e *benchEnv, n, workers int, mode notifyMode) (e2eResult, map[string]float64, error) {
	vc, err := e.dial(ctx)
	if err != nil {
		return e2eResult{}, nil, err
	}
	defer vc.Close()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
		return e2eResult{}, nil, err
	}
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: e.log})
	if err != nil {
		return e2eResult{}, nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, e.size.RunCap)
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	wctx, stopWorkers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "bench", Lanes: []string{benchLane}, Concurrency: 1,
			DisableNotifications: mode != notifyWorkers, Logger: e.log})
		if err != nil {
			stopWorkers()
			wg.Wait()
			return e2eResult{}, nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close(context.Background())
			_ = w.Run(wctx, func(context.Context, *sdk.Job) error {
				if done.Add(1) == int64(n) {
					close(all)
				}
				return nil
			})
		}()
	}
	defer func() { stopWorkers(); wg.Wait() }()
	if mode != notifyWorkers {
		flags := ""
		if mode == notifyUnheard {
			flags = "Ez"
		}
		raw := e.stats.Raw()
		if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", flags).Build()).Error(); err != nil {
			return e2eResult{}, nil, err
		}
	}
	before, _ := e.commandStats(ctx)
	cpu0, cerr0 := e.serverCPU(ctx)
	start := time.Now()
	err = produce(rctx, n, e.size.Producers, func(int) error {
		_, err := cl.CreateExecution(rctx, sdk.ExecutionSpec{Lane: benchLane, Payload: []byte("x")})
		return err
	})
	if err != nil && rctx.Err() == nil {
		return e2eResult{}, nil, err
	}
	r := e2eResult{want: n}
	select {
	case <-all:
	case <-rctx.Done():
		r.capped = true
	}
	r.elapsed, r.done = time.Since(start), done.Load()
	cpu1, cerr1 := e.serverCPU(ctx)
	r.cpuUs, r.cpu = cpuPerJob(cpu0, cpu1, cerr0 == nil, cerr1 == nil, r.done), cpu1
	after, _ := e.commandStats(ctx)
	return r, perJob(before, after, r.done), nil
}

func rawE2E(ctx context.Context, e *benchEnv, n, workers int) (e2eResult, map[string]float64, error) {
	vc, err := e.dial(ctx)
	if err != nil {
		return e2eResult{}, nil, err
	}
	defer vc.Close()
	raw := vc.Raw()
	rctx, cancel := context.WithTimeout(ctx, e.size.RunCap)
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil && done.Load() < int64(n) {
				res := raw.Do(rctx, raw.B().Brpop().Key("bench:q").Timeout(0.2).Build())
				if vk.IsValkeyNil(res.Error()) {
					continue
				}
				if res.Error() != nil {
					return
				}
				if done.Add(1) == int64(n) {
					close(all)
				}
			}
		}()
	}
	defer wg.Wait()
	before, _ := e.commandStats(ctx)
	cpu0, cerr0 := e.serverCPU(ctx)
	start := time.Now()
	err = produce(rctx, n, e.size.Producers, func(i int) error {
		return raw.Do(rctx, raw.B().Lpush().Key("bench:q").Element("x").Build()).Error()
	})
	if err != nil && rctx.Err() == nil {
		return e2eResult{}, nil, err
	}
	r := e2eResult{want: n}
	select {
	case <-all:
	case <-rctx.Done():
		r.capped = true
	}
	r.elapsed, r.done = time.Since(start), done.Load()
	cpu1, cerr1 := e.serverCPU(ctx)
	r.cpuUs, r.cpu = cpuPerJob(cpu0, cpu1, cerr0 == nil, cerr1 == nil, r.done), cpu1
	after, _ := e.commandStats(ctx)
	return r, perJob(before, after, r.done), nil
}
