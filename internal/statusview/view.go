// Package statusview draws a running deployment for people: a live,
// redrawn table on a terminal, or periodic progress lines when the output
// is a pipe or a file.
//
//	v := statusview.New(statusview.Config{Out: os.Stdout, TTY: true, Report: func() admin.Report { ... }})
//	go v.Run(ctx)
//
// Frames are pure functions of a Frame (Render, Lines), so tests render a
// fixed snapshot into a buffer; the View only adds the timing, the rates
// between two frames and, on a terminal, the escape codes.
package statusview

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/census"
	"github.com/fabric-host/fabric/internal/termsafe"
)

// Frame is everything one drawing shows.
type Frame struct {
	// Title is the first line (what runs, where).
	Title string
	// Subtitle is the second line (admin address, hints); optional.
	Subtitle string
	// Now is the frame's time; Elapsed the time since the view started.
	Now     time.Time
	Elapsed time.Duration
	// Report is the deployment's state.
	Report admin.Report
	// ActedPerSec is, per plugin, items acted on per second since the
	// previous frame.
	ActedPerSec map[string]float64
	// Workload is the latest line of the workload (optional).
	Workload string
	// Events are recent log lines, oldest first (optional).
	Events []string
	// Width is the terminal width; lines are cut to it (0: no limit).
	Width int
	// Height is the terminal height; the frame has at most this many
	// lines (0: no limit).
	Height int
}

// Render writes a full-screen frame: header, the plugin table,
// executions by state, throughput, the workload and recent events. It
// writes plain lines; the View adds cursor control on a terminal. Text it
// did not write — plugin names and reasons, the workload line, events,
// backend errors — is escaped (termsafe.String), so a control character
// in it cannot act on the terminal.
//
// CYCLES counts a scanner's sweeps and a dispatcher's calls (one per
// completion batch). With a Width, lines are cut to it and the plugin table drops its least
// telling columns (LAST SWAP, VERSION, CYCLES, FAULTS, in that order)
// until it fits. With a Height, the frame has at most Height lines: the
// recent events go first, then the quietest plugin rows (a last row says
// how many are not shown), so the header and column titles stay on screen.
func Render(w io.Writer, f Frame) {
	cut := func(s string) string { return cutTo(f.Width, termsafe.String(s)) }
	var head, foot, events []string
	add := func(dst *[]string) func(string, ...any) {
		return func(format string, a ...any) { *dst = append(*dst, cut(fmt.Sprintf(format, a...))) }
	}
	hl, fl, el := add(&head), add(&foot), add(&events)
	if f.Elapsed > 0 {
		hl("%s  %s  up %s", f.Title, f.Now.Format("15:04:05"), fmtDur(f.Elapsed))
	} else {
		hl("%s  %s", f.Title, f.Now.Format("15:04:05"))
	}
	if f.Subtitle != "" {
		hl("%s", f.Subtitle)
	}
	hl("")
	titles, rows := pluginTable(f)
	hl("%s", titles)
	fl("")
	if c := f.Report.Census; c != nil {
		var parts []string
		for _, st := range census.States {
			parts = append(parts, fmt.Sprintf("%s %d", st, c.Executions[st]))
		}
		fl("executions  %s", strings.Join(parts, " · "))
	} else {
		fl("executions  (no census yet)")
	}
	fl("throughput  %.1f executions/s reaching a terminal state", f.Report.Throughput)
	if c := f.Report.Census; c != nil && c.Ownership != nil {
		for _, l := range OwnershipLines(*c.Ownership) {
			fl("%s", l)
		}
	}
	for _, p := range f.Report.Plugins {
		if sh := p.Shadow; sh != nil {
			fl("shadow      %s %s beside %s: %d actions agree, %d disagree (%.1f %%), %d faults (fabric plugins diff %s)",
				p.Name, sh.Version, p.Version, sh.Agree, sh.Disagree, 100*sh.AgreeRatio(), sh.Faults, p.Name)
		}
	}
	if f.Report.Error != "" {
		fl("backend     %s", f.Report.Error)
	}
	if f.Workload != "" {
		fl("workload    %s", strings.TrimSpace(f.Workload))
	}
	if len(f.Events) > 0 {
		el("")
		el("recent events")
		for _, e := range f.Events {
			el("  %s", e)
		}
	}
	if f.Height > 0 {
		room := f.Height - len(head) - len(foot) - len(rows)
		switch {
		case room >= len(events):
		case room >= 3: // the blank, the title and the latest events
			events = append(events[:2:2], events[len(events)-(room-2):]...)
		default:
			events = nil
		}
		if over := len(head) + len(rows) + len(foot) + len(events) - f.Height; over > 0 {
			rows = fewerRows(f, rows, len(rows)-over-1)
		}
	}
	var b strings.Builder
	for _, part := range [][]string{head, rows, foot, events} {
		for _, l := range part {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	io.WriteString(w, b.String())
}

// column is one column of the plugin table.
type column struct {
	title string
	right bool
	cell  func(p host.PluginStatus) string
}

// pluginTable lays out the plugin table: its title line and one line per
// plugin (in f.Report.Plugins order), columns as wide as their widest
// cell, dropping columns while wider than f.Width.
func pluginTable(f Frame) (string, []string) {
	rate := func(p host.PluginStatus) string {
		if f.ActedPerSec == nil {
			return "-" // one snapshot: no rate
		}
		return fmt.Sprintf("%.1f", f.ActedPerSec[p.Name])
	}
	cols := []column{
		{"PLUGIN", false, func(p host.PluginStatus) string { return p.Name }},
		{"VERSION", false, func(p host.PluginStatus) string { return p.Version }},
		{"STATE", false, func(p host.PluginStatus) string { return string(p.State) }},
		{"CYCLES", true, cyclesOf},
		{"ACTED", true, func(p host.PluginStatus) string { return fmt.Sprint(p.Totals.Acted) }},
		{"ACTED/S", true, rate},
		{"ERRORS", true, func(p host.PluginStatus) string { return fmt.Sprint(p.Totals.Errors) }},
		{"FAULTS", true, func(p host.PluginStatus) string { return fmt.Sprint(p.Faults) }},
		{"LAG", true, func(p host.PluginStatus) string { return lagOf(f.Report.Census, p.Name) }},
		{"LAST SWAP", false, func(p host.PluginStatus) string { return swapOf(p, f.Now) }},
	}
	// Dropped first to last while the table is too wide.
	dropOrder := []string{"LAST SWAP", "VERSION", "CYCLES", "FAULTS"}
	cells := make([][]string, len(f.Report.Plugins))
	for i, p := range f.Report.Plugins {
		cells[i] = make([]string, len(cols))
		for j, c := range cols {
			if p.State == host.StateRejected && c.title != "PLUGIN" && c.title != "STATE" {
				cells[i][j] = "-"
				continue
			}
			cells[i][j] = termsafe.String(c.cell(p))
		}
	}
	width := make([]int, len(cols))
	for j, c := range cols {
		width[j] = len(c.title)
		for i, p := range f.Report.Plugins {
			if p.State == host.StateRejected && c.title == "STATE" {
				continue // its reason follows the state; it spans the rest
			}
			width[j] = max(width[j], len([]rune(cells[i][j])))
		}
	}
	keep := make([]bool, len(cols))
	for j := range keep {
		keep[j] = true
	}
	total := func() int {
		n := -1
		for j := range cols {
			if keep[j] {
				n += width[j] + 1
			}
		}
		return n
	}
	for _, d := range dropOrder {
		if f.Width <= 0 || total() <= f.Width {
			break
		}
		for j, c := range cols {
			if c.title == d {
				keep[j] = false
			}
		}
	}
	cut := func(s string) string { return cutTo(f.Width, s) }
	line := func(cell func(j int) string) string {
		var b strings.Builder
		for j, c := range cols {
			if !keep[j] {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			pad := strings.Repeat(" ", max(0, width[j]-len([]rune(cell(j)))))
			if c.right {
				b.WriteString(pad + cell(j))
			} else {
				b.WriteString(cell(j) + pad)
			}
		}
		return cut(strings.TrimRight(b.String(), " "))
	}
	titles := line(func(j int) string { return cols[j].title })
	var rows []string
	switch {
	case len(f.Report.Plugins) > 0:
	case f.Report.PluginsUnknown != "":
		rows = append(rows, "  (plugins unknown: "+f.Report.PluginsUnknown+")")
	default:
		rows = append(rows, "  (no plugins loaded)")
	}
	for i, p := range f.Report.Plugins {
		if p.State == host.StateRejected {
			// Name, "-" and the state, then the reason across the rest.
			var b strings.Builder
			for j := range cols[:3] {
				if keep[j] {
					b.WriteString(cells[i][j] + strings.Repeat(" ", max(0, width[j]-len([]rune(cells[i][j])))) + " ")
				}
			}
			rows = append(rows, cut(b.String()+termsafe.String(p.Reason)))
			continue
		}
		rows = append(rows, line(func(j int) string { return cells[i][j] }))
	}
	return titles, rows
}

// cutTo cuts s to width runes (0: no limit).
func cutTo(width int, s string) string {
	if r := []rune(s); width > 0 && len(r) > width {
		s = string(r[:width])
	}
	return s
}

// fewerRows keeps n of the plugin rows (at least one) and a last line
// saying how many are not shown. The rows kept are the ones worth a look:
// quarantined, rejected, with errors or faults; then the busiest; then the
// running before the disabled.
func fewerRows(f Frame, rows []string, n int) []string {
	ps := f.Report.Plugins
	if n >= len(rows) || len(rows) != len(ps) {
		return rows
	}
	n = max(1, n)
	trouble := func(p host.PluginStatus) bool {
		return p.State == host.StateQuarantined || p.State == host.StateRejected || p.Totals.Errors > 0 || p.Faults > 0
	}
	idx := make([]int, len(ps))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		pa, pb := ps[idx[a]], ps[idx[b]]
		if ta, tb := trouble(pa), trouble(pb); ta != tb {
			return ta
		}
		if ra, rb := f.ActedPerSec[pa.Name], f.ActedPerSec[pb.Name]; ra != rb {
			return ra > rb
		}
		if pa.Totals.Acted != pb.Totals.Acted {
			return pa.Totals.Acted > pb.Totals.Acted
		}
		// Then the running ones before the disabled and idle.
		return pa.State == host.StateRunning && pb.State != host.StateRunning
	})
	chosen := idx[:n]
	sort.Ints(chosen)
	out := make([]string, 0, n+1)
	for _, i := range chosen {
		out = append(out, rows[i])
	}
	return append(out, fmt.Sprintf("  … %d more plugins not shown (quiet ones; a taller terminal shows them)", len(rows)-n))
}

// ActedRates is, per plugin, items acted on per second between two
// snapshots of the plugins dt apart: the ACTED/S column. It is nil when
// dt is not positive (no rate can be told).
func ActedRates(prev, cur []host.PluginStatus, dt time.Duration) map[string]float64 {
	if dt <= 0 {
		return nil
	}
	old := make(map[string]host.PluginStatus, len(prev))
	for _, p := range prev {
		old[p.Name] = p
	}
	rates := make(map[string]float64, len(cur))
	for _, p := range cur {
		if o, ok := old[p.Name]; ok && p.Totals.Acted >= o.Totals.Acted {
			rates[p.Name] = float64(p.Totals.Acted-o.Totals.Acted) / dt.Seconds()
		}
	}
	return rates
}

// OwnershipLines describes who holds which partitions, one line per host
// (then the unowned partitions, if any), labelled "partitions".
func OwnershipLines(o partlease.Ownership) []string {
	label := "partitions"
	var out []string
	add := func(who string, ranges map[string]string) {
		var fams []string
		for _, fam := range partlease.Families {
			if r := ranges[fam.String()]; r != "" {
				fams = append(fams, fam.String()+" "+r)
			}
		}
		if len(fams) == 0 {
			fams = append(fams, "nothing")
		}
		out = append(out, fmt.Sprintf("%-11s %s  %s", label, who, strings.Join(fams, " · ")))
		label = ""
	}
	for _, h := range o.Hosts {
		state := "live"
		if !h.Live {
			state = "gone, leases not expired yet"
		}
		add(fmt.Sprintf("%s (%s, %d)", h.Host, state, h.Partitions), h.Ranges)
	}
	if len(o.Hosts) == 0 {
		return []string{"partitions  no partition leases held (hosts scan every partition, or none runs)"}
	}
	if o.Free > 0 {
		add(fmt.Sprintf("unowned (%d)", o.Free), o.Unowned)
	}
	return out
}

// Lines returns the progress lines of a frame for a pipe: one status line,
// then one line per plugin event since prev (a plugin loaded, swapped,
// changed state or unloaded). prev may be nil (first frame).
func Lines(prev *admin.Report, f Frame) []string {
	var out []string
	if prev != nil {
		out = append(out, pluginEvents(prev.Plugins, f.Report.Plugins)...)
	}
	var states []string
	if c := f.Report.Census; c != nil {
		for _, st := range census.States {
			states = append(states, fmt.Sprintf("%s=%d", st, c.Executions[st]))
		}
	} else {
		states = append(states, "n/a")
	}
	running, acted, errs, faults := 0, uint64(0), uint64(0), int64(0)
	rate := 0.0
	worst, worstLag := "", int64(-1)
	for _, p := range f.Report.Plugins {
		if p.State == host.StateRunning {
			running++
		}
		acted += uint64(p.Totals.Acted)
		errs += uint64(p.Totals.Errors)
		faults += p.Faults
		rate += f.ActedPerSec[p.Name]
		if c := f.Report.Census; c != nil {
			if l, ok := c.LagMs[p.Name]; ok && l > worstLag {
				worst, worstLag = p.Name, l
			}
		}
	}
	s := fmt.Sprintf("status %6.1fs  throughput %.1f/s  executions %s  plugins %d/%d running acted %d (%.1f/s) errors %d faults %d",
		f.Elapsed.Seconds(), f.Report.Throughput, strings.Join(states, " "), running, len(f.Report.Plugins), acted, rate, errs, faults)
	if worst != "" {
		s += fmt.Sprintf("  max lag %s (%s)", fmtDur(time.Duration(worstLag)*time.Millisecond), worst)
	}
	if c := f.Report.Census; c != nil {
		for _, name := range census.DuePlugins() {
			if w, ok := c.Waiting[name]; ok {
				s += fmt.Sprintf("  waiting (%s): %s, oldest %s", name, w, fmtDur(time.Duration(w.OldestMs)*time.Millisecond))
			}
		}
	}
	if c := f.Report.Census; c != nil && c.Ownership != nil && len(c.Ownership.Hosts) > 0 {
		s += fmt.Sprintf("  hosts %d, unowned partitions %d", len(c.Ownership.Hosts), c.Ownership.Free)
	}
	if f.Report.Error != "" {
		s += "  backend: " + f.Report.Error
	}
	out = append(out, s)
	for i, l := range out {
		out[i] = termsafe.String(l) // plugin names, reasons, errors
	}
	return out
}

// pluginEvents describes what changed between two plugin lists.
func pluginEvents(prev, cur []host.PluginStatus) []string {
	old := map[string]host.PluginStatus{}
	for _, p := range prev {
		old[p.Name] = p
	}
	var out []string
	for _, p := range cur {
		o, ok := old[p.Name]
		delete(old, p.Name)
		switch {
		case !ok && p.State == host.StateRejected:
			out = append(out, fmt.Sprintf("file %s rejected: %s", p.Name, p.Reason))
		case !ok:
			out = append(out, fmt.Sprintf("plugin %s %s loaded (%s)", p.Name, p.Version, p.State))
		case o.SHA256 != p.SHA256 || o.Swaps != p.Swaps:
			out = append(out, fmt.Sprintf("plugin %s swapped %s -> %s (sha256 %.12s)", p.Name, o.Version, p.Version, p.SHA256))
		case o.State != p.State:
			s := fmt.Sprintf("plugin %s %s -> %s", p.Name, o.State, p.State)
			if p.Reason != "" {
				s += ": " + p.Reason
			}
			out = append(out, s)
		}
	}
	gone := make([]string, 0, len(old))
	for n := range old {
		gone = append(gone, n)
	}
	sort.Strings(gone)
	for _, n := range gone {
		if old[n].State == host.StateRejected {
			out = append(out, fmt.Sprintf("file %s no longer rejected", n))
			continue
		}
		out = append(out, fmt.Sprintf("plugin %s unloaded", n))
	}
	return out
}

// cyclesOf is the CYCLES cell: a scanner's sweeps; a dispatcher's calls,
// since it runs once per completion batch (and per sweep scan when it
// sweeps too) and its sweep count alone would read 0 beside everything
// it acted on.
func cyclesOf(p host.PluginStatus) string {
	if p.Kind == abi.KindDispatcher {
		return fmt.Sprint(p.Calls)
	}
	return fmt.Sprint(p.Cycles)
}

func lagOf(c *census.Census, plugin string) string {
	if c == nil {
		return "?"
	}
	l, ok := c.LagMs[plugin]
	if !ok {
		return "-"
	}
	return fmtDur(time.Duration(l) * time.Millisecond)
}

func swapOf(p host.PluginStatus, now time.Time) string {
	if p.Swaps == 0 || p.LastSwap.IsZero() {
		return "-"
	}
	s := fmtDur(now.Sub(p.LastSwap)) + " ago"
	if p.Swaps > 1 {
		s += fmt.Sprintf(" (%d swaps)", p.Swaps)
	}
	return s
}

// fmtDur prints a duration compactly: 0s, 850ms, 3.2s, 4m05s, 2h10m.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// Config configures a View.
type Config struct {
	// Out receives the frames. Required.
	Out io.Writer
	// TTY draws a redrawn full-screen frame; false prints Lines.
	TTY bool
	// Interval is the time between frames (default 1 s on a terminal, 2 s
	// on a pipe).
	Interval time.Duration
	// Title and Subtitle head every TTY frame.
	Title, Subtitle string
	// Report returns the deployment's state. Required.
	Report func() admin.Report
	// Width and Height return the terminal size (nil or 0: no limit).
	Width, Height func() int
	// Workload returns the latest workload line (optional).
	Workload func() string
	// Events returns recent log lines (optional).
	Events func() []string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// View draws frames on an interval until its context ends.
//
// # Notes
//
//   - Run blocks; on a terminal it switches to the alternate screen and
//     hides the cursor, and restores both before it returns.
type View struct {
	cfg   Config
	mu    sync.Mutex
	start time.Time
	prev  *admin.Report
	prevT time.Time
}

// New fills cfg's defaults; a nil Out or Report is a wiring mistake and
// panics.
func New(cfg Config) *View {
	if cfg.Out == nil || cfg.Report == nil {
		panic("statusview: Config.Out and Config.Report are required")
	}
	def := 2 * time.Second
	if cfg.TTY {
		def = time.Second
	}
	cfg.Interval = cmp.Or(cfg.Interval, def)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &View{cfg: cfg}
}

// Frame builds the next frame (and advances the rate baseline).
func (v *View) Frame() Frame {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.cfg.Now()
	if v.start.IsZero() {
		v.start = now
	}
	r := v.cfg.Report()
	f := Frame{Title: v.cfg.Title, Subtitle: v.cfg.Subtitle, Now: now, Elapsed: now.Sub(v.start), Report: r,
		ActedPerSec: map[string]float64{}}
	if v.prev != nil {
		if rates := ActedRates(v.prev.Plugins, r.Plugins, now.Sub(v.prevT)); rates != nil {
			f.ActedPerSec = rates
		}
	}
	if v.cfg.Width != nil {
		f.Width = v.cfg.Width()
	}
	if v.cfg.Height != nil {
		f.Height = v.cfg.Height()
	}
	if v.cfg.Workload != nil {
		f.Workload = v.cfg.Workload()
	}
	if v.cfg.Events != nil {
		f.Events = v.cfg.Events()
	}
	return f
}

// advance records f as the baseline of the next frame and returns the
// previous report.
func (v *View) advance(f Frame) *admin.Report {
	v.mu.Lock()
	defer v.mu.Unlock()
	prev := v.prev
	r := f.Report
	v.prev, v.prevT = &r, f.Now
	return prev
}

// Escape sequences of the terminal frame.
const (
	enterScreen = "\x1b[?1049h\x1b[?25l" // alternate screen, hide cursor
	leaveScreen = "\x1b[?25h\x1b[?1049l" // show cursor, main screen
	home        = "\x1b[H"
	eraseLine   = "\x1b[K"
	eraseBelow  = "\x1b[J"
)

// Run draws a frame at once and then every Interval until ctx ends.
func (v *View) Run(ctx context.Context) {
	out := v.cfg.Out
	if v.cfg.TTY {
		io.WriteString(out, enterScreen)
		defer io.WriteString(out, leaveScreen)
	}
	t := time.NewTicker(v.cfg.Interval)
	defer t.Stop()
	for {
		v.Draw()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Draw draws one frame now.
func (v *View) Draw() {
	f := v.Frame()
	prev := v.advance(f)
	out := v.cfg.Out
	if !v.cfg.TTY {
		io.WriteString(out, strings.Join(Lines(prev, f), "\n")+"\n")
		return
	}
	var b strings.Builder
	Render(&b, f)
	var s strings.Builder
	s.WriteString(home)
	// No newline after the last line: on a frame as tall as the screen it
	// would scroll the first line away.
	for i, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if i > 0 {
			s.WriteString("\n")
		}
		s.WriteString(l + eraseLine)
	}
	s.WriteString(eraseBelow)
	io.WriteString(out, s.String())
}

// Tail keeps the last lines written to it: the sink of a workload's
// progress lines and of logs while a terminal view owns the screen.
//
// # Notes
//
//   - Safe for concurrent use.
type Tail struct {
	mu      sync.Mutex
	keep    int
	partial []byte
	lines   []string
}

// NewTail keeps the last n complete lines.
func NewTail(n int) *Tail { return &Tail{keep: max(1, n)} }

// Write implements io.Writer.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := strings.IndexByte(string(t.partial), '\n')
		if i < 0 {
			break
		}
		t.lines = append(t.lines, string(t.partial[:i]))
		t.partial = t.partial[i+1:]
	}
	if over := len(t.lines) - t.keep; over > 0 {
		t.lines = append([]string(nil), t.lines[over:]...)
	}
	return len(p), nil
}

// Lines returns the kept lines, oldest first.
func (t *Tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}

// Last returns the last complete line ("" before the first).
func (t *Tail) Last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return t.lines[len(t.lines)-1]
}
