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
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// nodeSample is one cluster node's counters: commands called so far (INFO
// commandstats, commands inside FCALLs included) and CPU µs (INFO cpu).
type nodeSample struct {
	calls int64
	cpu   cpuSample
	// byCmd and usec are calls and server µs per command name.
	byCmd, usec map[string]int64
}

// sampleNode reads a node's command count and CPU time.
func sampleNode(ctx context.Context, c vk.Client) (nodeSample, error) {
	s, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nodeSample{}, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := nodeSample{byCmd: map[string]int64{}, usec: map[string]int64{}}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		num, rest, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(num, 10, 64)
		out.calls += v
		out.byCmd[name] = v
		if _, u, ok := strings.Cut(rest, "usec="); ok {
			u, _, _ = strings.Cut(u, ",")
			out.usec[name], _ = strconv.ParseInt(u, 10, 64)
		}
	}
	s, err = c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return nodeSample{}, fmt.Errorf("INFO cpu: %w", err)
	}
	f := map[string]float64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if x, err := strconv.ParseFloat(v, 64); err == nil {
			f[k] = x
		}
	}
	if sys, ok := f["used_cpu_sys_main_thread"]; ok {
		out.cpu = cpuSample{us: (sys + f["used_cpu_user_main_thread"]) * 1e6, main: true}
	} else {
		out.cpu = cpuSample{us: (f["used_cpu_sys"] + f["used_cpu_user"]) * 1e6}
	}
	return out, nil
}

// spreadRun is one lane's throughput run on the cluster.
type spreadRun struct {
	e2eResult
	// share is each node's fraction of the server commands of the run;
	// cpuPerExec each node's CPU µs per execution.
	share, cpuPerExec []float64
	calls             int64
	// cmds and usec are calls and server µs per execution by command,
	// summed over the nodes.
	cmds, usec map[string]float64
}

// runSpread measures one lane on a 3-primary cluster: a default lane (one
// partition, so one node) and a lane spread over every flow partition
// (sdk.Client.SetLaneSpread), the same workload each: the per-node share
// of server commands, the throughput of each, and from per-node server CPU
// per execution a projection of what each added node would add.
func runSpread(ctx context.Context, e *benchEnv, sc *Scenario) error {
	n, workers := e.size.E2EJobs/2, e.size.Workers[len(e.size.Workers)-1]
	sc.Size = fmt.Sprintf("%d executions per lane, %d producers, %d workers of concurrency 1, %d primaries, cap %s per run",
		n, e.size.Producers, workers, valkeytest.ClusterPrimaries, e.size.RunCap)
	cl, err := valkeytest.StartCluster(ctx)
	if err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	defer cl.Stop()
	nodes := make([]vk.Client, len(cl.Nodes))
	for i := range cl.Nodes {
		if nodes[i], err = cl.NodeClient(i); err != nil {
			return err
		}
		defer nodes[i].Close()
	}
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: cl.URL(), Logger: e.log})
	if err != nil {
		return err
	}
	defer vc.Close()
	one, spread := "bench-one", "bench-spread"
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{one, spread}}); err != nil {
		return err
	}
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: e.log})
	if err != nil {
		return err
	}
	if err := client.SetLaneSpread(ctx, spread, model.LaneSpread{Spread: true}); err != nil {
		return err
	}
	runs := map[string]*spreadRun{}
	for _, lane := range []string{one, spread} {
		r, err := spreadE2E(ctx, e, vc, client, nodes, lane, n, workers)
		if err != nil {
			return fmt.Errorf("lane %s: %w", lane, err)
		}
		runs[lane] = r
	}
	pct := func(xs []float64) string {
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = fmt.Sprintf("node %d %.1f %%", i+1, 100*x)
		}
		return strings.Join(parts, ", ")
	}
	for _, lane := range []string{spread, one} {
		r := runs[lane]
		kind := "spread lane (every flow partition)"
		goal := "each within ±10 % of ⅓"
		if lane == one {
			kind, goal = "default lane (FlowFabric's one partition)", ""
		}
		for i, s := range r.share {
			sc.Rows = append(sc.Rows, Row{Measure: fmt.Sprintf("share of server commands, node %d, %s", i+1, kind),
				Fabric: 100 * s, Peer: nan(), Unit: "%", Goal: goal})
		}
		_, topCalls := topCommands(r.cmds, 5)
		usec, topUsec := topCommands(r.usec, 5)
		sc.Notes = append(sc.Notes, fmt.Sprintf("%s: %s of %d server commands (%s per execution: %s); commandstats µs per execution %s (%s)%s",
			kind, pct(r.share), r.calls, fmtNum(float64(r.calls)/float64(max(r.done, 1)), ""), topCalls,
			fmtNum(usec, ""), topUsec, r.cappedNote()))
	}
	s, o := runs[spread], runs[one]
	sc.Rows = append(sc.Rows, Row{Measure: "executions/s, one spread lane on 3 nodes", Fabric: s.rate(),
		Versus: "one default lane (1 node)", Peer: o.rate(), Unit: "/s", HigherIsBetter: true,
		Note: "same run, same cluster, same client and workers; the three nodes, the producers and the workers share this machine's cores, so this compares placement, not added hardware"})
	total := func(xs []float64) (t float64) {
		for _, x := range xs {
			t += x
		}
		return t
	}
	sCPU, oCPU := total(s.cpuPerExec), total(o.cpuPerExec)
	sc.Rows = append(sc.Rows, Row{Measure: "server CPU µs per execution, all nodes", Fabric: sCPU, Versus: "default lane",
		Peer: oCPU, Unit: "µs", Note: fmt.Sprintf("INFO cpu per node (%s), sys+user delta over the run / executions; spread per node: %s; default per node: %s",
			cpuLabel(s.cpu), fmtCPUs(s.cpuPerExec), fmtCPUs(o.cpuPerExec))})
	if sCPU > 0 {
		per := 1e6 / sCPU
		sc.Rows = append(sc.Rows,
			Row{Measure: "projection: server-bound executions/s added per node, spread lane", Fabric: per, Peer: nan(), Unit: "/s",
				Note: fmt.Sprintf("a projection, not a measurement: one node's main thread gives 10⁶ µs of CPU per second; a spread lane puts %s µs of server CPU per execution evenly on the nodes, so N nodes serve about N × %s executions/s before the servers saturate (1 node %s, 3 nodes %s, 6 nodes %s); a default lane stays on one node, capped near %s executions/s however many nodes are added. Assumes clients are not the bottleneck (here they are) and the even shares measured above",
					fmtNum(sCPU, ""), fmtNum(per, ""), fmtNum(per, ""), fmtNum(3*per, ""), fmtNum(6*per, ""), fmtNum(1e6/max(oCPU, 1), ""))})
	}
	sc.Notes = append(sc.Notes,
		"Each run: producers call sdk.Client.CreateExecution on one lane while workers (sdk.Worker.Run, concurrency 1) run a no-op handler; commands and CPU are read on every primary before and after (INFO commandstats, commands inside FCALLs included; INFO cpu).",
		"The spread lane is sdk.Client.SetLaneSpread(lane, model.LaneSpread{Spread: true}): its executions go to every flow partition by the hash of their id; workers read its partitions 16 per round beside eligible-work notifications from every node.")
	return nil
}

func fmtCPUs(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmtNum(x, "")
	}
	return strings.Join(parts, " / ")
}

// spreadE2E runs n executions of lane through producers and workers on the
// cluster and samples every node around the run.
func spreadE2E(ctx context.Context, e *benchEnv, vc *valkey.Client, client *sdk.Client, nodes []vk.Client,
	lane string, n, workers int) (*spreadRun, error) {
	rctx, cancel := context.WithTimeout(ctx, e.size.RunCap)
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	wctx, stopWorkers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stopWorkers(); wg.Wait() }()
	for i := 0; i < workers; i++ {
		w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "bench-" + lane, Lanes: []string{lane}, Concurrency: 1, Logger: e.log})
		if err != nil {
			return nil, err
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
	before := make([]nodeSample, len(nodes))
	for i, c := range nodes {
		s, err := sampleNode(ctx, c)
		if err != nil {
			return nil, err
		}
		before[i] = s
	}
	start := time.Now()
	err := produce(rctx, n, e.size.Producers, func(int) error {
		_, err := client.CreateExecution(rctx, sdk.ExecutionSpec{Lane: lane, Payload: []byte("x")})
		return err
	})
	if err != nil && rctx.Err() == nil {
		return nil, err
	}
	r := &spreadRun{e2eResult: e2eResult{want: n}}
	select {
	case <-all:
	case <-rctx.Done():
		r.capped = true
	}
	r.elapsed, r.done = time.Since(start), done.Load()
	r.share = make([]float64, len(nodes))
	r.cpuPerExec = make([]float64, len(nodes))
	calls := make([]int64, len(nodes))
	r.cmds, r.usec = map[string]float64{}, map[string]float64{}
	for i, c := range nodes {
		s, err := sampleNode(ctx, c)
		if err != nil {
			return nil, err
		}
		for k, v := range perJob(before[i].byCmd, s.byCmd, r.done) {
			r.cmds[k] += v
		}
		for k, v := range perJob(before[i].usec, s.usec, r.done) {
			r.usec[k] += v
		}
		calls[i] = s.calls - before[i].calls
		r.calls += calls[i]
		r.cpuPerExec[i] = cpuPerJob(before[i].cpu, s.cpu, true, true, r.done)
		r.cpu = s.cpu
	}
	for i := range calls {
		r.share[i] = float64(calls[i]) / float64(max(r.calls, 1))
	}
	return r, nil
}
