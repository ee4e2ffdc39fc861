package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
)

// runScannerCost measures (a) one full cycle of the delayed promoter over
// 256 partitions of an idle deployment as the wasm plugin in the host vs
// the same plugin source compiled natively (BenchmarkCycleNativeValkey,
// same server, same database), and (b) the Valkey commands/s the default
// plugin set costs an idle deployment vs an idle asynq server.
func runScannerCost(ctx context.Context, e *benchEnv, sc *Scenario) error {
	db := e.freshDB()
	vc, err := e.dialDB(ctx, db)
	if err != nil {
		return err
	}
	defer vc.Close()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
		return err
	}
	sc.Size = fmt.Sprintf("%d cycles per variant; idle windows of %s", e.size.ScanCycles, e.size.IdleHold)
	wasm, perCall, callsPerCycle, err := wasmCycle(ctx, e, vc)
	if err != nil {
		return err
	}
	native, err := nativeCycle(ctx, e, db)
	row := Row{Measure: "delayed_promoter, one idle cycle over 256 partitions", Fabric: wasm, Versus: "same source compiled natively",
		Peer: native, Unit: "ms", Goal: "wasm ≤ 1.1× native",
		Note: fmt.Sprintf("wasm: %.0f plugin calls per cycle (up to %d partitions per fabric_scan_batch call), %s each inside the host (Extism call incl. its host-function round trips to Valkey); the rest of the cycle is the loop between calls", callsPerCycle, host.HostPartitionsPerCallDefault, fmtNum(perCall, "ms"))}
	if err != nil {
		row.Peer, row.Note = nan(), "native run failed: "+err.Error()
	}
	sc.Rows = append(sc.Rows, row)

	// Idle commands/s of the default plugin set vs an idle asynq server.
	files, err := e.defaultPlugins()
	if err != nil {
		return err
	}
	if err := e.prewarm(ctx, files...); err != nil {
		return err
	}
	dir, err := pluginDir(files...)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	idleRate := func(timers host.TimerConfig) (float64, int, error) {
		idle, err := e.dial(ctx)
		if err != nil {
			return 0, 0, err
		}
		defer idle.Close()
		if err := idle.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
			return 0, 0, err
		}
		h, err := e.startHost(ctx, dir, idle, hostOpts{timers: timers})
		if err != nil {
			return 0, 0, err
		}
		defer stopHost(h)
		// Let the first sweeps (every partition once) pass first.
		if !waitFor(ctx, time.Minute, 10*time.Millisecond, func() bool {
			st, _ := h.Plugin("delayed_promoter")
			return st.Calls >= int64(idle.Partitions().Flow)
		}) {
			return 0, 0, fmt.Errorf("first sweep never finished")
		}
		before, _ := e.commandCalls(ctx)
		t0 := time.Now()
		sleepCtx(ctx, e.size.IdleHold)
		after, _ := e.commandCalls(ctx)
		return float64(after-before) / time.Since(t0).Seconds(), len(h.Plugins()), nil
	}
	timersRate, n, err := idleRate(host.TimerConfig{})
	if err != nil {
		return err
	}
	pollRate, _, err := idleRate(host.TimerConfig{Disabled: true})
	if err != nil {
		return err
	}
	fabRate := timersRate
	row = Row{Measure: fmt.Sprintf("idle Valkey commands/s, default plugin set (%d plugins, due-time timers)", n), Fabric: fabRate, Versus: "asynq idle server",
		Peer: nan(), Unit: "/s", OfLimit: fabRate / e.limitOr1(),
		Note: fmt.Sprintf("INFO commandstats over the window after the first sweep, commands run inside FCALLs included, 256 flow partitions; the same set with fixed polling (timers off): %s", fmtNum(pollRate, "/s"))}
	before, _ := e.commandCalls(ctx)
	pr, err := e.peer(ctx, "asynq-idle", "-socket", e.vsrv.Socket(), "-db", strconv.Itoa(e.freshDB()), "-hold", e.size.IdleHold.String())
	after, _ := e.commandCalls(ctx)
	if err != nil {
		row.Note += "; asynq failed: " + err.Error()
	} else {
		row.Versus, row.Peer = "asynq "+pr.Version+" idle server (default config)", float64(after-before)/pr.Seconds
	}
	sc.Rows = append(sc.Rows, row)

	sc.Notes = append(sc.Notes,
		"wasm: the host's scanner loop (Extism calls of up to 32 partitions each, timeout context, host functions, cycle records); native: the same pdk scan function called in a loop over a pdk.Host backed by the same Valkey client (host.NativeHost); both scan the lane \"default\".",
		"The idle-commands ratio compares different amounts of maintenance: fabric's set sweeps 256 partitions per scanner, asynq's server polls its queues and runs its forwarder, recoverer, janitor, syncer and heartbeater.")
	return nil
}

// wasmCycle runs the promoter in a host with a 20 ms interval and returns
// the mean span of its complete cycles and of one plugin call, in ms, and
// the plugin calls per cycle (fabric_scan_batch scans several partitions
// per call).
func wasmCycle(ctx context.Context, e *benchEnv, vc *valkey.Client) (cycleMs, callMs, callsPerCycle float64, err error) {
	dir, err := e.stockPluginDir(ctx, "delayed_promoter")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	want := uint64(e.size.ScanCycles + 2)
	// Timers off: a cycle is a full sweep of the 256 partitions.
	h, err := e.startHost(ctx, dir, vc, hostOpts{plugins: map[string]host.PluginConfig{
		"delayed_promoter": {Interval: 20 * time.Millisecond},
	}, records: int(want+1) * 256, timers: host.TimerConfig{Disabled: true}})
	if err != nil {
		return 0, 0, 0, err
	}
	defer stopHost(h)
	if !waitFor(ctx, time.Minute, 5*time.Millisecond, func() bool { st, _ := h.Plugin("delayed_promoter"); return st.Cycles > want }) {
		return 0, 0, 0, fmt.Errorf("delayed_promoter did not complete %d cycles", want)
	}
	type span struct {
		start, end time.Time
		n          int
		calls      time.Duration
		callStarts map[time.Time]bool // one per plugin call: a batch call's partitions share it
	}
	spans := map[uint64]*span{}
	for _, r := range h.Records("delayed_promoter") {
		s := spans[r.Cycle]
		if s == nil {
			s = &span{start: r.Start, end: r.End}
			spans[r.Cycle] = s
		}
		if r.Start.Before(s.start) {
			s.start = r.Start
		}
		if r.End.After(s.end) {
			s.end = r.End
		}
		s.n++
		if s.callStarts == nil {
			s.callStarts = map[time.Time]bool{}
		}
		if !s.callStarts[r.Start] {
			s.callStarts[r.Start] = true
			s.calls += r.End.Sub(r.Start)
		}
	}
	var sum, calls time.Duration
	var n, ncalls int
	for c, s := range spans {
		if c >= 2 && s.n == 256 && n < e.size.ScanCycles { // cycle 1 warms the instance pool
			sum += s.end.Sub(s.start)
			calls += s.calls
			ncalls += len(s.callStarts)
			n++
		}
	}
	if n == 0 {
		return 0, 0, 0, fmt.Errorf("no complete cycle recorded")
	}
	return float64(sum.Microseconds()) / float64(n) / 1000, float64(calls.Microseconds()) / float64(ncalls) / 1000, float64(ncalls) / float64(n), nil
}

var msPerCycle = regexp.MustCompile(`([0-9.]+) ms/cycle`)

// nativeCycle runs BenchmarkCycleNativeValkey on database db.
func nativeCycle(ctx context.Context, e *benchEnv, db int) (float64, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkCycleNativeValkey$",
		"-benchtime", fmt.Sprintf("%dx", e.size.ScanCycles+1), "-count", "1", "./plugins/scanners/delayed_promoter/")
	cmd.Dir = e.repo
	cmd.Env = append(os.Environ(), "FABRIC_BENCH_VALKEY_URL="+e.vsrv.URL(), "FABRIC_BENCH_VALKEY_DB="+strconv.Itoa(db))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("go test: %w: %s", err, lastLines(out.Bytes(), 5))
	}
	m := msPerCycle.FindSubmatch(out.Bytes())
	if m == nil {
		return 0, fmt.Errorf("no ms/cycle in %q", lastLines(out.Bytes(), 5))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
