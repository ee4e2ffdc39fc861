package statusview_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/census"
	"github.com/fabric-host/fabric/internal/statusview"
)

var t0 = time.Date(2025, 6, 1, 12, 30, 0, 0, time.UTC)

// fixedReport is a deployment with one busy, one swapped and one
// quarantined plugin.
func fixedReport() admin.Report {
	return admin.Report{
		At: t0,
		Plugins: []host.PluginStatus{
			{Name: "delayed_promoter", Version: "1.0.0", State: host.StateRunning, Cycles: 120, SHA256: "aa",
				Totals: abi.ScanResult{Scanned: 900, Acted: 850, Errors: 2}},
			{Name: "lease_expiry", Version: "1.0.1", State: host.StateRunning, Cycles: 40, Swaps: 1, SHA256: "bbbbbbbbbbbbbbbb",
				LastSwap: t0.Add(-12 * time.Second)},
			{Name: "unblock", Version: "0.9.0", State: host.StateQuarantined, Reason: "trap: unreachable", Cycles: 7, Faults: 3, SHA256: "cc"},
		},
		Census: &census.Census{At: t0,
			Executions: map[string]int64{"eligible": 12, "delayed": 30, "active": 8, "suspended": 3, "blocked": 4, "terminal": 5400},
			LagMs:      map[string]int64{"delayed_promoter": 250, "lease_expiry": 0}},
		Throughput: 95.5,
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	statusview.Render(&b, statusview.Frame{
		Title: "fabric dev on private redis-server", Subtitle: "admin http://127.0.0.1:9480",
		Now: t0, Elapsed: 65 * time.Second, Report: fixedReport(),
		ActedPerSec: map[string]float64{"delayed_promoter": 14.25},
		Workload:    "run    65.0s  created 100/s  completed 98/s",
		Events:      []string{`level=ERROR msg="plugin quarantined" plugin=unblock`},
	})
	want := `fabric dev on private redis-server  12:30:00  up 1m05s
admin http://127.0.0.1:9480

PLUGIN           VERSION STATE       CYCLES ACTED ACTED/S ERRORS FAULTS   LAG LAST SWAP
delayed_promoter 1.0.0   running        120   850    14.2      2      0 250ms -
lease_expiry     1.0.1   running         40     0     0.0      0      0    0s 12.0s ago
unblock          0.9.0   quarantined      7     0     0.0      0      3     - -

executions  eligible 12 · delayed 30 · active 8 · suspended 3 · blocked 4 · terminal 5400
throughput  95.5 executions/s reaching a terminal state
workload    run    65.0s  created 100/s  completed 98/s

recent events
  level=ERROR msg="plugin quarantined" plugin=unblock
`
	if got := b.String(); got != want {
		t.Fatalf("frame (-want, +got):\n%s\n---\n%s", want, got)
	}

	t.Run("CutToWidth", func(t *testing.T) {
		var b bytes.Buffer
		statusview.Render(&b, statusview.Frame{Title: "fabric", Now: t0, Report: fixedReport(), Width: 40})
		for _, l := range strings.Split(b.String(), "\n") {
			if len([]rune(l)) > 40 {
				t.Fatalf("line longer than 40: %q", l)
			}
		}
	})
}

func TestLines(t *testing.T) {
	t.Parallel()
	prev := fixedReport()
	cur := fixedReport()
	cur.Plugins[1].Swaps, cur.Plugins[1].Version, cur.Plugins[1].SHA256 = 2, "1.0.2", "dddddddddddddddddddd"
	cur.Plugins[2].State, cur.Plugins[2].Reason = host.StateRunning, ""
	cur.Plugins = append(cur.Plugins[:2], cur.Plugins[2], host.PluginStatus{Name: "zz_new", Version: "0.1.0", State: host.StateIdle})
	prev.Plugins = append(prev.Plugins, host.PluginStatus{Name: "gone", Version: "1.0.0"})
	got := statusview.Lines(&prev, statusview.Frame{Now: t0, Elapsed: 4 * time.Second, Report: cur,
		ActedPerSec: map[string]float64{"delayed_promoter": 10}})
	want := []string{
		"plugin lease_expiry swapped 1.0.1 -> 1.0.2 (sha256 dddddddddddd)",
		"plugin unblock quarantined -> running",
		"plugin zz_new 0.1.0 loaded (idle)",
		"plugin gone unloaded",
		"status    4.0s  throughput 95.5/s  executions eligible=12 delayed=30 active=8 suspended=3 blocked=4 terminal=5400  plugins 3/4 running acted 850 (10.0/s) errors 2 faults 3  max lag 250ms (delayed_promoter)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines (-want, +got):\n%s\n---\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

func TestViewDrawsTerminalFrame(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	v := statusview.New(statusview.Config{Out: &b, TTY: true, Title: "fabric", Report: fixedReport,
		Now: func() time.Time { return t0 }})
	v.Draw()
	out := b.String()
	if !strings.HasPrefix(out, "\x1b[H") || !strings.HasSuffix(out, "\x1b[J") || !strings.Contains(out, "delayed_promoter") {
		t.Fatalf("terminal frame: %q", out)
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	tl := statusview.NewTail(2)
	tl.Write([]byte("a\nb"))
	tl.Write([]byte("\nc\nd"))
	if got := strings.Join(tl.Lines(), ","); got != "b,c" || tl.Last() != "c" {
		t.Fatalf("tail %q last %q", got, tl.Last())
	}
}

func TestOwnershipLines(t *testing.T) {
	t.Parallel()
	o := partlease.Ownership{
		Hosts: []partlease.HostShare{
			{Host: "a-1", Live: true, Partitions: 160, Ranges: map[string]string{"flow": "0-127", "budget": "0-15", "quota": "0-15"}},
			{Host: "b-2", Live: false, Partitions: 150, Ranges: map[string]string{"flow": "128-245", "budget": "16-31", "quota": "16-31"}},
			{Host: "c-3", Live: true, Ranges: map[string]string{}},
		},
		Unowned: map[string]string{"flow": "246-255"},
		Free:    10,
	}
	want := []string{
		"partitions  a-1 (live, 160)  flow 0-127 · budget 0-15 · quota 0-15",
		"            b-2 (gone, leases not expired yet, 150)  flow 128-245 · budget 16-31 · quota 16-31",
		"            c-3 (live, 0)  nothing",
		"            unowned (10)  flow 246-255",
	}
	if got := statusview.OwnershipLines(o); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := statusview.OwnershipLines(partlease.Ownership{Free: 320}); len(got) != 1 || !strings.Contains(got[0], "no partition leases held") {
		t.Fatalf("no hosts: %q", got)
	}
	rep := fixedReport()
	rep.Census.Ownership = &o
	var b bytes.Buffer
	statusview.Render(&b, statusview.Frame{Title: "fabric", Now: t0, Report: rep})
	if !strings.Contains(b.String(), want[0]+"\n"+want[1]) {
		t.Fatalf("frame lacks the ownership lines:\n%s", b.String())
	}
}

// TestRejectedFileRows: a rejected file is a row of the live view with
// its reason, an event when it appears and when it is cleared.
func TestRejectedFileRows(t *testing.T) {
	t.Parallel()
	rows := admin.RejectedRows([]host.FileStatus{{Path: "/p/notwasm.wasm", State: host.StateInvalid, Reason: host.RejectNotWasm, Error: "host: not a wasm module"}})
	cur := fixedReport()
	cur.Plugins = append(cur.Plugins, rows...)
	var b bytes.Buffer
	statusview.Render(&b, statusview.Frame{Title: "fabric", Now: t0, Report: cur})
	if want := "notwasm.wasm     -       rejected    not wasm: host: not a wasm module\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("frame lacks %q:\n%s", want, b.String())
	}
	prev := fixedReport()
	if got := statusview.Lines(&prev, statusview.Frame{Now: t0, Report: cur}); got[0] != "file notwasm.wasm rejected: not wasm: host: not a wasm module" {
		t.Fatalf("appearing: %q", got)
	}
	if got := statusview.Lines(&cur, statusview.Frame{Now: t0, Report: prev}); got[0] != "file notwasm.wasm no longer rejected" {
		t.Fatalf("clearing: %q", got)
	}
}

// stockReport is the stock plugin set (26 plugins, the longest name 25
// characters) with a few busy ones.
func stockReport() admin.Report {
	r := fixedReport()
	r.Plugins = nil
	for i, n := range strings.Fields(`attempt_timeout budget_reconciler budget_reset cancel_reconciler delayed_promoter
		dependency dependency_reconciler edge_cancel edge_cancel_reconciler execution_deadline flow_projector
		index_reconciler lease_expiry pending_wp_expiry pg_attempt_timeout pg_delayed_promoter pg_dependency_reconciler
		pg_edge_cancel_reconciler pg_lease_expiry pg_retention pg_suspension_timeout pg_worker_registry_sweep
		quota_reconciler retention_trimmer suspension_timeout unblock`) {
		r.Plugins = append(r.Plugins, host.PluginStatus{Name: n, Version: "1.0.0", State: host.StateRunning,
			Cycles: 123456, Totals: abi.ScanResult{Acted: uint32(1000 * i)}, Swaps: 2, LastSwap: t0.Add(-90 * time.Second)})
	}
	return r
}

// TestRenderFitsATerminal: names over 22 characters keep the columns
// aligned, 80 columns keep the numbers (dropping LAST SWAP and VERSION
// rather than cutting LAG), and 24 rows keep the header and the column
// titles on screen with the busiest plugins.
func TestRenderFitsATerminal(t *testing.T) {
	t.Parallel()
	rates := map[string]float64{"pg_edge_cancel_reconciler": 42, "delayed_promoter": 7}
	var b bytes.Buffer
	statusview.Render(&b, statusview.Frame{Title: "fabric", Now: t0, Report: stockReport(), ActedPerSec: rates})
	lines := strings.Split(b.String(), "\n")
	title := lines[2]
	end := strings.Index(title, "ACTED/S") + len("ACTED/S")
	for _, l := range lines[3:29] {
		if len(l) < end || l[end-1] == ' ' || (len(l) > end && l[end] != ' ') {
			t.Errorf("ACTED/S column not aligned under its title:\n%s\n%s", title, l)
		}
	}
	if !strings.Contains(b.String(), "pg_edge_cancel_reconciler 1.0.0") {
		t.Errorf("long name runs into the next column:\n%s", b.String())
	}

	b.Reset()
	statusview.Render(&b, statusview.Frame{Title: "fabric", Now: t0, Report: stockReport(), ActedPerSec: rates, Width: 80, Height: 24})
	lines = strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) > 24 {
		t.Errorf("%d lines in a 24-row terminal:\n%s", len(lines), b.String())
	}
	for _, l := range lines {
		if len([]rune(l)) > 80 {
			t.Errorf("line longer than 80: %q", l)
		}
	}
	if lines[0] != "fabric  12:30:00" || !strings.HasPrefix(lines[2], "PLUGIN ") {
		t.Errorf("header or column titles not on screen:\n%s", b.String())
	}
	for _, col := range []string{"STATE", "ACTED", "ACTED/S", "ERRORS", "LAG"} {
		if !strings.Contains(lines[2], " "+col+" ") && !strings.HasSuffix(lines[2], " "+col) {
			t.Errorf("column %s dropped at 80 columns: %q", col, lines[2])
		}
	}
	// Disabled plugins (the pg_* ones on Valkey) are not trouble: a
	// running quiet one is shown before them.
	rep := stockReport()
	for i := range rep.Plugins {
		rep.Plugins[i].Totals.Acted = 0 // all quiet
		if strings.HasPrefix(rep.Plugins[i].Name, "pg_") {
			rep.Plugins[i].State = host.StateDisabled
		}
	}
	var d bytes.Buffer
	statusview.Render(&d, statusview.Frame{Title: "fabric", Now: t0, Report: rep, ActedPerSec: rates, Width: 80, Height: 24})
	if !strings.Contains(d.String(), "budget_reconciler") || strings.Contains(d.String(), "pg_lease_expiry") {
		t.Errorf("disabled rows shown before a running one:\n%s", d.String())
	}
	out := b.String()
	if !strings.Contains(out, "pg_edge_cancel_reconciler") || !strings.Contains(out, "delayed_promoter") ||
		!strings.Contains(out, "more plugins not shown") || !strings.Contains(out, "executions  eligible") {
		t.Errorf("the busiest plugins, the count of hidden ones and the executions must show:\n%s", out)
	}
}

func TestActedRates(t *testing.T) {
	t.Parallel()
	prev := []host.PluginStatus{{Name: "a", Totals: abi.ScanResult{Acted: 100}}, {Name: "b", Totals: abi.ScanResult{Acted: 5}}}
	cur := []host.PluginStatus{{Name: "a", Totals: abi.ScanResult{Acted: 300}}, {Name: "b", Totals: abi.ScanResult{Acted: 5}}, {Name: "new"}}
	r := statusview.ActedRates(prev, cur, 2*time.Second)
	if r["a"] != 100 || r["b"] != 0 || len(r) != 2 {
		t.Fatalf("rates %v", r)
	}
	if statusview.ActedRates(prev, cur, 0) != nil {
		t.Fatal("rates without elapsed time")
	}
	var b bytes.Buffer
	statusview.Render(&b, statusview.Frame{Title: "fabric", Now: t0, Report: fixedReport()})
	if !strings.Contains(b.String(), "850       -") {
		t.Fatalf("no rate known must show -, not 0.0:\n%s", b.String())
	}
}

// TestViewEscapesWhatItDidNotWrite: a plugin's name and reason, the
// workload line, an event and a backend error reach the screen escaped
// (they come from plugin files, workers and the backend), in the frame
// and in the progress lines; the table keeps its alignment.
func TestViewEscapesWhatItDidNotWrite(t *testing.T) {
	t.Parallel()
	r := fixedReport()
	r.Plugins[2].Name = "unblock\x1b[2J"
	r.Plugins[2].Reason = "trap\u202e\x9b"
	r.Error = "backend \x1b]0;title\x07"
	f := statusview.Frame{Title: "t", Now: t0, Report: r, Workload: "run \x1b[31mred", Events: []string{"ev \u2066x\u2069"}}
	var b bytes.Buffer
	statusview.Render(&b, f)
	prev := fixedReport()
	prev.Plugins[2].State = host.StateRunning
	prev.Plugins[2].Name = "unblock\x1b[2J"
	lines := strings.Join(statusview.Lines(&prev, f), "\n")
	for _, out := range []string{b.String(), lines} {
		if strings.ContainsAny(out, "\x1b\x07\u202e\u2066\u2069\x9b") || !strings.Contains(out, `unblock\x1b[2J`) {
			t.Fatalf("raw control characters or no escaped name:\n%q", out)
		}
	}
	if !strings.Contains(lines, `trap\u202e\x9b`) {
		t.Errorf("lines lack the escaped reason:\n%s", lines)
	}
	for _, want := range []string{`backend \x1b]0;title\a`, `run \x1b[31mred`, `ev \u2066x\u2069`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("frame lacks %s:\n%s", want, b.String())
		}
	}
	// The escaped name sets the PLUGIN column's width.
	var title, row string
	for _, l := range strings.Split(b.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "PLUGIN"):
			title = l
		case strings.HasPrefix(l, `unblock\x1b`):
			row = l
		}
	}
	if i, j := strings.Index(title, "VERSION"), strings.Index(row, "0.9.0"); i < 0 || i != j {
		t.Fatalf("columns misaligned:\n%s\n%s", title, row)
	}
}

// TestDispatcherCycles: a dispatcher runs per completion batch, not per
// sweep, so its CYCLES are its calls — not 0 beside everything it acted
// on, as the dependency dispatcher's row read (CYCLES 0, ACTED 1170).
func TestDispatcherCycles(t *testing.T) {
	t.Parallel()
	r := fixedReport()
	r.Plugins = append(r.Plugins, host.PluginStatus{Name: "dependency", Version: "1.0.0", Kind: abi.KindDispatcher,
		State: host.StateRunning, Calls: 391, Totals: abi.ScanResult{Acted: 1170}})
	var b bytes.Buffer
	statusview.Render(&b, statusview.Frame{Title: "t", Now: t0, Report: r})
	for _, l := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[0] == "dependency" {
			if f[3] != "391" || f[4] != "1170" {
				t.Fatalf("dependency row: CYCLES %s ACTED %s, want 391 1170:\n%s", f[3], f[4], l)
			}
			return
		}
	}
	t.Fatalf("no dependency row:\n%s", b.String())
}
