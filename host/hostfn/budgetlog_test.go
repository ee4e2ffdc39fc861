package hostfn

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
)

// countingSink counts what reaches a log handler's writer.
type countingSink struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func (s *countingSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += len(p)
	s.lines = append(s.lines, string(p))
	return len(p), nil
}

// The log budget is a token bucket: a burst at once, then the rate; a
// line over it is dropped and counted, and the drops are noted at the
// first one and then at most every logNoteEvery.
func TestLogBudgetBucket(t *testing.T) {
	t.Parallel()
	var s Stats
	s.SetLogBudget(1000, 4000)
	t0 := time.Unix(1000, 0)
	for i := range 4 {
		if ok, note, _, _ := s.admitLog(1000, t0); !ok || note {
			t.Fatalf("line %d of the burst: ok %v note %v", i, ok, note)
		}
	}
	ok, note, lines, bytes := s.admitLog(1000, t0)
	if ok || !note || lines != 1 || bytes != 1000 {
		t.Fatalf("over the burst: ok %v note %v lines %d bytes %d; want dropped and noted", ok, note, lines, bytes)
	}
	if ok, note, _, _ := s.admitLog(1000, t0.Add(500*time.Millisecond)); ok || note {
		t.Fatalf("half a line refilled: ok %v note %v; want dropped, not noted again", ok, note)
	}
	if ok, _, _, _ := s.admitLog(1000, t0.Add(1500*time.Millisecond)); !ok {
		t.Fatal("a second later a line fits again")
	}
	ok, note, lines, bytes = s.admitLog(5000, t0.Add(12*time.Second))
	if ok || !note || lines != 2 || bytes != 6000 {
		t.Fatalf("after %s: ok %v note %v lines %d bytes %d; want the two drops since the last note", logNoteEvery, ok, note, lines, bytes)
	}
	if s.LogLinesDropped.Load() != 3 || s.LogBytesDropped.Load() != 7000 {
		t.Fatalf("dropped %d lines %d bytes, want 3 and 7000", s.LogLinesDropped.Load(), s.LogBytesDropped.Load())
	}
	s.SetLogBudget(-1, 0)
	if ok, _, _, _ := s.admitLog(1<<30, t0.Add(13*time.Second)); !ok {
		t.Fatal("an unlimited budget dropped a line")
	}
}

// A caller logging 4 KiB lines as fast as it can writes at most its
// budget (the burst, then the rate) to the log sink in a measured window,
// plus the note of what was dropped.
func TestLogBudgetFlood(t *testing.T) {
	t.Parallel()
	sink := &countingSink{}
	c := &Caller{Plugin: "logflood", Version: "1.0.0", Tag: "{fp:0}", Stats: &Stats{}, Logger: slog.New(slog.NewTextHandler(sink, nil))}
	rate, burst := c.Stats.LogBudget()
	msg := strings.Repeat("x", 4096)
	const window = 500 * time.Millisecond
	start := time.Now()
	attempted := 0
	for time.Since(start) < window {
		c.logFor(context.Background(), slog.LevelInfo, msg, "plugin", c.Plugin, "plugin_version", c.Version, "partition", c.Tag, "source", "guest")
		attempted += len(msg)
	}
	elapsed := time.Since(start)
	allowed := float64(burst) + elapsed.Seconds()*float64(rate)
	sink.mu.Lock()
	written, lines := sink.n, len(sink.lines)
	sink.mu.Unlock()
	t.Logf("in %s: %d bytes attempted, %d written in %d lines (budget %.0f bytes: %d burst + %d/s)",
		elapsed.Round(time.Millisecond), attempted, written, lines, allowed, burst, rate)
	// Each line written cost at least its bytes; the note is the one
	// line outside the budget.
	if float64(written) > allowed+1024 {
		t.Fatalf("%d bytes written in %s, above the budget of %.0f", written, elapsed, allowed)
	}
	if c.Stats.LogLinesDropped.Load() == 0 || !strings.Contains(strings.Join(sink.lines, ""), "dropped_lines=") {
		t.Fatalf("no drop counted or noted: %d dropped", c.Stats.LogLinesDropped.Load())
	}
}

// A metric with a name that is not 1-128 bytes of [A-Za-z0-9_:.-], a
// value that is not finite, or a new name beyond MaxMetricsPerPlugin is
// dropped and counted, and only the first drop is logged; good metrics
// still count.
func TestMetricDropped(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	c := &Caller{Plugin: "metricbomb", Stats: &Stats{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	report := func(m abi.Metric) {
		if err := c.Stats.metric(m); err != nil {
			c.Stats.metricDropped(c, err)
		}
	}
	report(abi.Metric{Name: "scans", Value: 1})
	report(abi.Metric{Name: "sibling_cancel_reconcile.no_op", Value: 1})
	bad := []abi.Metric{
		{Name: "bad\xff\xfe", Value: 1},
		{Name: strings.Repeat("m", 1<<20), Value: 1},
		{Name: "", Value: 1},
		{Name: "with space", Value: 1},
		{Name: "nan", Value: math.NaN()},
		{Name: "inf", Kind: abi.MetricGauge, Value: math.Inf(1)},
	}
	for _, m := range bad {
		report(m)
	}
	for i := range MaxMetricsPerPlugin + 10 {
		report(abi.Metric{Name: "n" + strings.Repeat("0", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676)), Value: 1})
	}
	report(abi.Metric{Name: "scans", Value: 1}) // kept names still count
	got := c.Stats.Metrics()
	if got["scans"] != 2 || got["sibling_cancel_reconcile.no_op"] != 1 {
		t.Fatalf("good metrics %v", got)
	}
	if len(got) != MaxMetricsPerPlugin {
		t.Fatalf("%d metrics kept, want the bound %d", len(got), MaxMetricsPerPlugin)
	}
	if d := c.Stats.MetricsDropped.Load(); d != int64(len(bad))+12 {
		t.Fatalf("%d dropped, want %d", d, len(bad)+12)
	}
	if n := strings.Count(logs.String(), "plugin metric dropped"); n != 1 || logs.Len() > 1024 {
		t.Fatalf("drops logged %d times in %d bytes, want once and short:\n%s", n, logs.Len(), logs.String())
	}
}
