package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
)

// hostileFixtures are the hostile plugins of the hostile-set soak
// (cmd/fabric/hostile_test.go): every fault fixture, a 1 GiB memory
// request, a 30 s-timeout infinite loop, a slow huge output and a
// host-call flood.
var hostileFixtures = []string{"trap", "panic", "loop", "membomb", "hugeoutput", "badoutput", "ungranted", "legacyptr",
	"plugerr", "bigmem", "selfgrant", "loop30", "slowhuge", "flood", "abimismatch", "noexport", "truncated", "corrupt", "notwasm"}

// hostileCadence measures the default plugin set's sweep cadence (timers
// off, so every plugin sweeps every interval) over a window, alone and
// then with the hostile set loaded beside it, on the same server, and
// returns the row. Cadence is sweeps started in the window over the
// sweeps the intervals ask for, summed over the plugins whose interval
// fits three times in the window.
func hostileCadence(ctx context.Context, e *benchEnv, files []string) (Row, error) {
	row := Row{Measure: "stock set sweep cadence (sweeps started / due) with the hostile set loaded", Versus: "the same set alone", Unit: "",
		HigherIsBetter: true, Goal: "≥ 0.9× of the set alone"}
	// The operator grants each hostile plugin what it requests (so that
	// what it does at run time is measured), but selfgrant and bigmem,
	// refused at load; the flood gets a host-call budget.
	var hostile []string
	policy := host.StockPolicy()
	for _, name := range hostileFixtures {
		f, err := e.pluginFile(name)
		if err != nil {
			return row, err
		}
		hostile = append(hostile, f)
		if name == "selfgrant" || name == "bigmem" {
			continue
		}
		if in, err := host.Inspect(ctx, f, host.InspectConfig{CacheDir: e.cache}); err == nil {
			g := host.GrantOf(in.Manifest)
			if name == "flood" {
				g.HostCallsPerSecond = 20_000
			}
			policy.Plugins[in.Manifest.Name] = g
		}
	}
	window := max(3*e.size.IdleHold, 3*time.Second)
	measure := func(extra []string) (float64, string, error) {
		dir, err := pluginDir(files...)
		if err != nil {
			return 0, "", err
		}
		defer os.RemoveAll(dir)
		vc, err := e.dial(ctx)
		if err != nil {
			return 0, "", err
		}
		defer vc.Close()
		if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
			return 0, "", err
		}
		h, err := e.startHost(ctx, dir, vc, hostOpts{timers: host.TimerConfig{Disabled: true}, policy: &policy,
			plugins: map[string]host.PluginConfig{"legacyptr": {Config: map[string]string{"lie": "1"}}}})
		if err != nil {
			return 0, "", err
		}
		defer stopHost(h)
		for _, f := range extra {
			if err := copyFile(f, filepath.Join(dir, "hostile_"+filepath.Base(f))); err != nil {
				return 0, "", err
			}
		}
		if len(extra) > 0 && !waitFor(ctx, time.Minute, 50*time.Millisecond, func() bool {
			return len(h.Plugins())+len(h.Rejected()) >= len(files)+len(extra)
		}) {
			return 0, "", fmt.Errorf("the hostile set did not load within a minute")
		}
		from := time.Now()
		sleepCtx(ctx, window)
		to := time.Now()
		var got, want float64
		var names []string
		for _, st := range h.Plugins() {
			interval := time.Duration(st.IntervalMs) * time.Millisecond
			if !strings.Contains(strings.Join(files, " "), "/"+st.Name+".wasm") || st.State == host.StateIdle ||
				interval <= 0 || 3*interval > window {
				continue
			}
			n := 0
			for _, s := range sweepStarts(h.Records(st.Name)) {
				if !s.Before(from) && s.Before(to) {
					n++
				}
			}
			got += float64(n)
			want += float64(window / interval)
			names = append(names, st.Name)
		}
		if want == 0 {
			return 0, "", fmt.Errorf("no stock plugin sweeps often enough for a %s window", window)
		}
		return got / want, strings.Join(names, ", "), nil
	}
	alone, names, err := measure(nil)
	if err != nil {
		return row, err
	}
	with, _, err := measure(hostile)
	if err != nil {
		return row, err
	}
	row.Fabric, row.Peer = with, alone
	row.Note = fmt.Sprintf("sweeps started over sweeps due in a %s window, timers off (every partition every interval), 256 flow partitions; %s; hostile set: %s; alone %.2f, with the hostile set %.2f of the intervals' cadence",
		window, names, strings.Join(hostileFixtures, " "), alone, with)
	return row, nil
}

// sweepStarts returns when each sweep in recs began, in cycle order.
func sweepStarts(recs []host.CycleRecord) []time.Time {
	first := map[uint64]time.Time{}
	var cycles []uint64
	for _, r := range recs {
		s, ok := first[r.Cycle]
		if !ok {
			cycles = append(cycles, r.Cycle)
		}
		if !ok || r.Start.Before(s) {
			first[r.Cycle] = r.Start
		}
	}
	out := make([]time.Time, 0, len(cycles))
	for _, c := range cycles {
		out = append(out, first[c])
	}
	return out
}
