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
// request, a 30 s-timeout infinite loop, a slow huge output, a host-call
// flood, a lying read_batch request, kernel blocks past the cap, an
// impostor of a stock plugin, reads past the grant, hostile metric names,
// a log flood and a scan recursing with no loop.
var hostileFixtures = []string{"trap", "panic", "loop", "membomb", "hugeoutput", "badoutput", "ungranted", "legacyptr",
	"plugerr", "bigmem", "selfgrant", "loop30", "slowhuge", "flood", "abimismatch", "noexport", "truncated", "corrupt", "notwasm",
	"liebatch", "kernelbomb", "squatter", "readleak", "metricbomb", "logflood", "recurse_scan"}

// runHostile measures the default plugin set's sweeps alone and then
// with the hostile set loaded beside it, in the same run (hostileCadence).
func runHostile(ctx context.Context, e *benchEnv, sc *Scenario) error {
	files, err := e.defaultPlugins()
	if err != nil {
		return err
	}
	if err := e.prewarm(ctx, files...); err != nil {
		return err
	}
	rows, size, err := hostileCadence(ctx, e, files)
	if err != nil {
		return err
	}
	sc.Size, sc.Rows = size, rows
	sc.Notes = append(sc.Notes,
		"Each host runs the default plugin set with timers off (every partition every interval) over 256 flow partitions; the second also has the hostile set, copied in all at once and measured from the moment every file is loaded or refused, so the window includes the hostile plugins' first calls (a 30 s infinite loop among them).",
		"The host's scheduler (host/fair.go) runs a plugin whose last call faulted on probation: behind every healthy call, at most ProbationCalls of them at once (half the cores); after a timeout, a plugin that never returned is cut at 1 s (doubling every second fault) instead of its timeout. It decides who gets a turn, not who gets a core: a call cannot be moved off a core once it runs.")
	return nil
}

// cadence is what one host's window showed of the stock set.
type cadence struct {
	// ratio is sweeps started over sweeps due.
	ratio float64
	// worstGap is the largest gap between sweep starts over the plugin's
	// interval; worstName names that plugin.
	worstGap  float64
	worstName string
	// waitMax is the longest a stock call waited for its turn; calls and
	// probation count the stock calls and those that ran on probation.
	waitMax          time.Duration
	calls, probation int
	names            []string
	// hostileProbation counts the hostile plugins' calls on probation.
	hostileProbation int
}

// hostileCadence measures the default plugin set's sweep cadence (timers
// off, so every plugin sweeps every interval) over a window, alone and
// then with the hostile set loaded beside it, on the same server, and
// returns the rows. Cadence is sweeps started in the window over the
// sweeps the intervals ask for, summed over the plugins whose interval
// fits three times in the window.
func hostileCadence(ctx context.Context, e *benchEnv, files []string) ([]Row, string, error) {
	// The operator grants each hostile plugin what it requests (so that
	// what it does at run time is measured), but selfgrant and bigmem,
	// refused at load; the flood gets a host-call budget.
	var hostile []string
	policy := host.StockPolicy()
	// installAs is the file name each hostile file goes in as: its
	// plugin's (a plugin file must be named after its plugin), else its own.
	installAs := map[string]string{}
	for _, name := range hostileFixtures {
		f, err := e.pluginFile(name)
		if err != nil {
			return nil, "", err
		}
		hostile = append(hostile, f)
		installAs[f] = filepath.Base(f)
		in, err := host.Inspect(ctx, f, host.InspectConfig{CacheDir: e.cache})
		if err == nil && name != "squatter" { // the impostor goes in under its own name, refused as such
			installAs[f] = in.Manifest.Name + ".wasm"
		}
		if name == "selfgrant" || name == "bigmem" {
			continue
		}
		if err == nil {
			g := host.GrantOf(in.Manifest)
			if name == "flood" {
				g.HostCallsPerSecond = 20_000
			}
			policy.Plugins[in.Manifest.Name] = g
		}
	}
	window := max(3*e.size.IdleHold, 3*time.Second)
	measure := func(extra []string) (cadence, error) {
		var c cadence
		dir, err := pluginDir(files...)
		if err != nil {
			return c, err
		}
		defer os.RemoveAll(dir)
		vc, err := e.dial(ctx)
		if err != nil {
			return c, err
		}
		defer vc.Close()
		if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
			return c, err
		}
		h, err := e.startHost(ctx, dir, vc, hostOpts{timers: host.TimerConfig{Disabled: true}, policy: &policy,
			plugins: map[string]host.PluginConfig{"legacyptr": {Config: map[string]string{"lie": "1"}}}})
		if err != nil {
			return c, err
		}
		defer stopHost(h)
		for _, f := range extra {
			if err := copyFile(f, filepath.Join(dir, installAs[f])); err != nil {
				return c, err
			}
		}
		if len(extra) > 0 && !waitFor(ctx, time.Minute, 50*time.Millisecond, func() bool {
			return len(h.Plugins())+len(h.Rejected()) >= len(files)+len(extra)
		}) {
			return c, fmt.Errorf("the hostile set did not load within a minute")
		}
		from := time.Now()
		sleepCtx(ctx, window)
		to := time.Now()
		var got, want float64
		for _, st := range h.Plugins() {
			recs := h.Records(st.Name)
			if !strings.Contains(strings.Join(files, " "), "/"+st.Name+".wasm") {
				for _, r := range recs {
					if r.Probation && !r.Start.Before(from) {
						c.hostileProbation++
					}
				}
				continue
			}
			interval := time.Duration(st.IntervalMs) * time.Millisecond
			if st.State == host.StateIdle || interval <= 0 || 3*interval > window {
				continue
			}
			for _, r := range recs {
				if !r.Start.Before(from) && r.Start.Before(to) {
					c.calls++
					c.waitMax = max(c.waitMax, r.Wait)
					if r.Probation {
						c.probation++
					}
				}
			}
			n, prev := 0, time.Time{}
			for _, s := range append(sweepStarts(recs), to) {
				if s.Before(from) {
					prev = s
					continue
				}
				if s.Before(to) {
					n++
				}
				if !prev.IsZero() {
					if g := float64(s.Sub(prev)) / float64(interval); g > c.worstGap {
						c.worstGap, c.worstName = g, st.Name
					}
				}
				prev = s
			}
			got += float64(n)
			want += float64(window / interval)
			c.names = append(c.names, st.Name)
		}
		if want == 0 {
			return c, fmt.Errorf("no stock plugin sweeps often enough for a %s window", window)
		}
		c.ratio = got / want
		return c, nil
	}
	alone, err := measure(nil)
	if err != nil {
		return nil, "", err
	}
	with, err := measure(hostile)
	if err != nil {
		return nil, "", err
	}
	size := fmt.Sprintf("a %s window per host, %d stock plugins (%s); hostile set: %s", window, len(alone.names),
		strings.Join(alone.names, ", "), strings.Join(hostileFixtures, " "))
	rows := []Row{
		{Measure: "stock set sweep cadence (sweeps started / due) with the hostile set loaded", Fabric: with.ratio,
			Versus: "the same set alone, same run", Peer: alone.ratio, HigherIsBetter: true, Goal: "≥ 0.9× of the set alone",
			Note: fmt.Sprintf("alone %.2f, with the hostile set %.2f of the intervals' cadence", alone.ratio, with.ratio)},
		{Measure: "stock set worst gap between sweeps (× the plugin's interval) with the hostile set loaded", Fabric: with.worstGap,
			Versus: "the same set alone, same run", Peer: alone.worstGap, Goal: "≤ 2× the interval",
			Note: fmt.Sprintf("worst: %s with the hostile set, %s alone", with.worstName, alone.worstName)},
		{Measure: "longest wait of a stock call for its turn (ms) with the hostile set loaded", Fabric: ms(with.waitMax),
			Versus: "the same set alone, same run", Peer: ms(alone.waitMax), Unit: "ms",
			Note: fmt.Sprintf("stock calls in the window: %d with the hostile set (%d on probation), %d alone; hostile calls on probation in the window: %d",
				with.calls, with.probation, alone.calls, with.hostileProbation)},
	}
	return rows, size, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

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
