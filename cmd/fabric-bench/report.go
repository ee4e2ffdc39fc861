package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Row is one measured figure of a scenario, side by side with its
// comparison.
type Row struct {
	// Measure names what was measured, with its unit.
	Measure string
	// Fabric is fabric's figure; NaN when not measured.
	Fabric float64
	// Versus names the comparison ("raw LPUSH/BRPOP", "asynq v0.26.0").
	Versus string
	// Peer is the comparison's figure; NaN when there is none.
	Peer float64
	// Unit formats both figures ("/s", "ms", "MiB").
	Unit string
	// HigherIsBetter picks the ratio's sense: fabric/peer when true,
	// peer/fabric when false, so a ratio ≥ 1 always means fabric is ahead.
	HigherIsBetter bool
	// Goal is the DEVELOPERS.md goal this row is judged against ("" none).
	Goal string
	// OfLimit, when > 0, is the figure as a fraction of the server's
	// pipelined no-op FCALL rate (scenario 8).
	OfLimit float64
	// Missing, when set, replaces the figures: the scenario could not be
	// measured ("not available: needs …").
	Missing string
	// Note is a short remark shown after the table.
	Note string
}

// Scenario is one section of BENCHMARKS.md.
type Scenario struct {
	ID      int
	Title   string
	Size    string // the bounded size actually run
	Rows    []Row
	Notes   []string
	Err     error
	Elapsed time.Duration
}

func nan() float64 { return math.NaN() }

// ratio returns how far ahead fabric is (≥ 1: fabric better).
func (r Row) ratio() float64 {
	if math.IsNaN(r.Fabric) || math.IsNaN(r.Peer) || r.Fabric <= 0 || r.Peer <= 0 {
		return math.NaN()
	}
	if r.HigherIsBetter {
		return r.Fabric / r.Peer
	}
	return r.Peer / r.Fabric
}

func fmtNum(v float64, unit string) string {
	if math.IsNaN(v) {
		return "–"
	}
	var s string
	switch a := math.Abs(v); {
	case a >= 100_000:
		s = fmt.Sprintf("%.0f k", v/1000)
	case a >= 10_000:
		s = fmt.Sprintf("%.1f k", v/1000)
	case a >= 100:
		s = fmt.Sprintf("%.0f", v)
	case a >= 10:
		s = fmt.Sprintf("%.1f", v)
	case a >= 1:
		s = fmt.Sprintf("%.2f", v)
	case a == 0:
		s = "0"
	default:
		s = fmt.Sprintf("%.3f", v)
	}
	if unit == "" {
		return s
	}
	if strings.HasPrefix(unit, "/") {
		return s + unit
	}
	return s + " " + unit
}

// Machine describes where the run happened.
type Machine struct {
	Cores     int
	CPU       string
	GoVersion string
	Valkey    string
	Postgres  string
	Kernel    string
	// LoadStart and LoadEnd are /proc/loadavg's 1-minute figure at the
	// start and the end: the machine is shared, so other work competes.
	LoadStart, LoadEnd string
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func detectMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	m.LoadStart = loadAvg()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// writeMarkdown renders the report.
func writeMarkdown(w io.Writer, m Machine, size string, started time.Time, total time.Duration, scs []*Scenario, gobench string) {
	fmt.Fprintf(w, "# BENCHMARKS\n\n")
	fmt.Fprintf(w, "Written by `make bench` (`cmd/fabric-bench`, size %q) on %s in %s. Every comparison was measured in the same run on the same machine and the same throwaway servers; numbers are never asserted by `make test`.\n\n",
		size, started.UTC().Format("2006-01-02 15:04 MST"), total.Round(time.Second))
	fmt.Fprintf(w, "**Machine:** %d cores (%s), %s, Linux %s; server %s; Postgres %s. Load average (1 min) %s at the start, %s at the end: the machine is shared, and the bench program, its servers and its peers all run on these cores.\n\n",
		m.Cores, m.CPU, m.GoVersion, m.Kernel, m.Valkey, m.Postgres, m.LoadStart, m.LoadEnd)
	fmt.Fprintf(w, "Ratio: fabric ÷ comparison for rates, comparison ÷ fabric for latencies, costs and memory, so **≥ 1× means fabric is ahead**. \"of limit\": the figure as a share of the server's pipelined no-op FCALL rate (scenario 8).\n\n")

	fmt.Fprintf(w, "## Summary\n\n| # | scenario | measure | fabric | comparison | ratio | goal |\n|---|---|---|---|---|---|---|\n")
	for _, sc := range scs {
		for _, r := range sc.Rows {
			if r.Goal == "" {
				continue
			}
			if r.Missing != "" {
				fmt.Fprintf(w, "| %d | %s | %s | %s | | | %s |\n", sc.ID, sc.Title, r.Measure, r.Missing, r.Goal)
				continue
			}
			cmpCell := "–"
			if r.Versus != "" {
				cmpCell = r.Versus + ": " + fmtNum(r.Peer, r.Unit)
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s |\n", sc.ID, sc.Title, r.Measure, fmtNum(r.Fabric, r.Unit),
				cmpCell, fmtRatio(r.ratio()), r.Goal)
		}
	}
	fmt.Fprintln(w)

	sorted := append([]*Scenario(nil), scs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	for _, sc := range sorted {
		fmt.Fprintf(w, "## %d. %s\n\n", sc.ID, sc.Title)
		if sc.Size != "" {
			fmt.Fprintf(w, "Size: %s. Took %s.\n\n", sc.Size, sc.Elapsed.Round(100*time.Millisecond))
		}
		if sc.Err != nil {
			fmt.Fprintf(w, "**Failed:** %v\n\n", sc.Err)
		}
		if len(sc.Rows) > 0 {
			fmt.Fprintf(w, "| measure | fabric | comparison | comparison's figure | ratio | of limit | goal |\n|---|---|---|---|---|---|---|\n")
			for _, r := range sc.Rows {
				if r.Missing != "" {
					fmt.Fprintf(w, "| %s | %s | %s | | | | %s |\n", r.Measure, r.Missing, r.Versus, r.Goal)
					continue
				}
				lim := ""
				if r.OfLimit > 0 {
					lim = fmt.Sprintf("%.1f %%", 100*r.OfLimit)
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Measure, fmtNum(r.Fabric, r.Unit), r.Versus,
					fmtNum(r.Peer, r.Unit), fmtRatio(r.ratio()), lim, r.Goal)
			}
			fmt.Fprintln(w)
		}
		for _, r := range sc.Rows {
			if r.Note != "" {
				fmt.Fprintf(w, "- %s: %s\n", r.Measure, r.Note)
			}
		}
		for _, n := range sc.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		fmt.Fprintln(w)
	}
	if gobench != "" {
		fmt.Fprintf(w, "## Go benchmarks\n\n`go test -run '^$' -bench` over the host and plugin packages in the same run (ns/op and custom metrics as Go prints them):\n\n```\n%s\n```\n", strings.TrimSpace(gobench))
	}
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	switch {
	case v >= 10:
		return fmt.Sprintf("%.0f×", v)
	case v < 0.1:
		return fmt.Sprintf("%.3f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

// percentiles returns p50, p99 and max of xs (sorted in place).
func percentiles(xs []float64) (p50, p99, mx float64) {
	if len(xs) == 0 {
		return nan(), nan(), nan()
	}
	sort.Float64s(xs)
	n := len(xs)
	return xs[n/2], xs[min(n-1, n*99/100)], xs[n-1]
}
