package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/fabric-host/fabric/host"
)

// runSwap measures hot-swap latency: the swapper fixture (256 partitions
// every 100 ms) is replaced Swaps times, alternating versions, and each
// swap is timed from the file's rename to the host serving the new
// version. Missed cycles are sweeps missing a partition or running one
// twice, read from the host's cycle records. The comparison is the
// alternative to a hot swap: a new host starting on the same directory
// until the plugin serves (compilation cache warm in both).
func runSwap(ctx context.Context, e *benchEnv, sc *Scenario) error {
	v1, err := e.pluginFile("swap_v1")
	if err != nil {
		return err
	}
	v2, err := e.pluginFile("swap_v2")
	if err != nil {
		return err
	}
	if err := e.prewarm(ctx, v1, v2); err != nil {
		return err
	}
	// The operator grants the swapper what it requests (its 30 s timeout).
	policy := host.StockPolicy()
	for _, f := range []string{v1, v2} {
		in, err := host.Inspect(ctx, f, host.InspectConfig{CacheDir: e.cache})
		if err != nil {
			return err
		}
		policy.Plugins[in.Manifest.Name] = host.GrantOf(in.Manifest)
	}
	vc, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer vc.Close()
	dir, err := pluginDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	target := filepath.Join(dir, "swapper.wasm")
	if err := copyFile(v1, target); err != nil {
		return err
	}
	// Timers off: every sweep visits all 256 partitions, so the record
	// check below can demand each exactly once.
	h, err := e.startHost(ctx, dir, vc, hostOpts{records: 1 << 18, timers: host.TimerConfig{Disabled: true}, policy: &policy})
	if err != nil {
		return err
	}
	defer stopHost(h)
	cycles := func() uint64 { st, _ := h.Plugin("swapper"); return st.Cycles }
	waitCycles := func(n uint64) error {
		from := cycles()
		if !waitFor(ctx, 20*time.Second, 5*time.Millisecond, func() bool { return cycles() > from+n }) {
			return fmt.Errorf("swapper stopped sweeping (cycle %d)", cycles())
		}
		return nil
	}
	if err := waitCycles(2); err != nil {
		return err
	}
	sc.Size = fmt.Sprintf("%d swaps of a 256-partition scanner sweeping every 100 ms", e.size.Swaps)
	var lat []float64
	for i := 0; i < e.size.Swaps; i++ {
		src, want := v2, "2.0.0"
		if i%2 == 1 {
			src, want = v1, "1.0.0"
		}
		start := time.Now()
		if err := copyFile(src, target); err != nil {
			return err
		}
		ok := waitFor(ctx, 10*time.Second, 200*time.Microsecond, func() bool {
			st, _ := h.Plugin("swapper")
			return st.Version == want && st.Swaps == i+1
		})
		if !ok {
			return fmt.Errorf("swap %d to %s did not serve within 10s", i+1, want)
		}
		lat = append(lat, float64(time.Since(start).Microseconds())/1000)
		if err := waitCycles(1); err != nil {
			return err
		}
	}
	if err := waitCycles(1); err != nil {
		return err
	}
	missed, checked := missedCycles(h.Records("swapper"), 256)
	stopHost(h)

	// Restart instead of swap: a new host on the same directory.
	var restart []float64
	for i := 0; i < max(1, e.size.Swaps/4); i++ {
		vc2, err := e.dial(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		h2, err := e.startHost(ctx, dir, vc2, hostOpts{timers: host.TimerConfig{Disabled: true}, policy: &policy})
		if err != nil {
			vc2.Close()
			return err
		}
		ok := waitFor(ctx, 10*time.Second, 200*time.Microsecond, func() bool {
			st, found := h2.Plugin("swapper")
			return found && st.Calls > 0
		})
		el := time.Since(start)
		stopHost(h2)
		vc2.Close()
		if !ok {
			return fmt.Errorf("restarted host never served swapper")
		}
		restart = append(restart, float64(el.Microseconds())/1000)
	}
	p50, p99, mx := percentiles(lat)
	r50, r99, _ := percentiles(restart)
	sc.Rows = append(sc.Rows,
		Row{Measure: "write → new version serving, p50", Fabric: p50, Versus: "host restart → serving, p50", Peer: r50, Unit: "ms", Goal: "≤ 1 s"},
		Row{Measure: "write → new version serving, p99", Fabric: p99, Versus: "host restart → serving, p99", Peer: r99, Unit: "ms", Goal: "≤ 1 s",
			Note: fmt.Sprintf("max %s over %d swaps; the host debounces writes for 150 ms before loading", fmtNum(mx, "ms"), len(lat))},
		Row{Measure: "missed or doubled partition calls", Fabric: float64(missed), Versus: "", Peer: nan(), Goal: "0",
			Note: fmt.Sprintf("%d sweeps of 256 partitions checked, each partition exactly once per sweep", checked)},
	)
	sc.Notes = append(sc.Notes, "asynq and River have no plugin hot swap: deploying new maintenance logic means restarting the process, which is the comparison here (fabric's own host, warm compilation cache).")
	return nil
}

// missedCycles counts partition calls missing from or repeated in the
// complete sweeps of recs (the last sweep may be partial), plus sweeps
// missing from the sequence.
func missedCycles(recs []host.CycleRecord, partitions int) (missed, checked int) {
	by := map[uint64]map[int]int{}
	for _, r := range recs {
		if by[r.Cycle] == nil {
			by[r.Cycle] = map[int]int{}
		}
		by[r.Cycle][r.Partition]++
		if r.Error != "" {
			missed++
		}
	}
	cs := make([]uint64, 0, len(by))
	for c := range by {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
	for i, c := range cs {
		if i > 0 && c != cs[i-1]+1 {
			missed += int(c-cs[i-1]-1) * partitions
		}
		if i == 0 || i == len(cs)-1 { // the ring may have cut the first; the last may be running
			continue
		}
		checked++
		for p := 0; p < partitions; p++ {
			if n := by[c][p]; n != 1 {
				missed += max(1-n, n-1)
			}
		}
	}
	return missed, checked
}
