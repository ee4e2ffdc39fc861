package hostfn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// The defaults of a plugin's log budget (Stats.SetLogBudget) and lines
// (Config.MaxLogBytes).
const (
	// DefaultLogBytesPerSecond is the rate one plugin's lines may reach
	// the host's log at, on average: hundreds of ordinary lines a second.
	DefaultLogBytesPerSecond = 32 << 10
	// DefaultLogBurstBytes is what a plugin may write at once after
	// being quiet (a failing sweep's warnings).
	DefaultLogBurstBytes = 256 << 10
	// DefaultMaxLogBytes truncates one line's message.
	DefaultMaxLogBytes = 4096
)

// logLineOverhead is what one line costs beyond its message: the time,
// level and the attributes the host adds (plugin, version, partition).
const logLineOverhead = 128

// logNoteEvery is how often at most a plugin's dropped lines are noted.
const logNoteEvery = 10 * time.Second

// logBucket is one plugin's log budget: a token bucket of bytes, and the
// lines dropped since they were last noted.
type logBucket struct {
	mu sync.Mutex
	// perSecond and burst are the budget (0: the defaults; perSecond
	// negative: unlimited).
	perSecond, burst int64
	tokens           float64
	last             time.Time
	lastNote         time.Time
	// lines and bytes dropped since the last note.
	lines, bytes int64
}

// admitLog reports whether a line costing cost bytes fits the plugin's
// log budget at now, and takes it from the budget when it does. A line
// that does not fit is counted as dropped. note is set (with the lines
// and bytes dropped since the previous note) when dropped lines are due
// a note: at the first drop, then at most every logNoteEvery.
func (s *Stats) admitLog(cost int, now time.Time) (ok bool, note bool, lines, bytes int64) {
	b := &s.logs
	b.mu.Lock()
	defer b.mu.Unlock()
	rate, burst := b.budget()
	if rate < 0 {
		return true, false, 0, 0
	}
	if b.last.IsZero() {
		b.tokens = float64(burst)
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(burst), b.tokens+d.Seconds()*float64(rate))
	}
	b.last = now
	if float64(cost) <= b.tokens {
		b.tokens -= float64(cost)
		ok = true
	} else {
		b.lines++
		b.bytes += int64(cost)
		s.LogLinesDropped.Add(1)
		s.LogBytesDropped.Add(int64(cost))
	}
	if b.lines > 0 && (b.lastNote.IsZero() || now.Sub(b.lastNote) >= logNoteEvery) {
		note, lines, bytes = true, b.lines, b.bytes
		b.lines, b.bytes, b.lastNote = 0, 0, now
	}
	return ok, note, lines, bytes
}

// budget returns the bucket's rate and burst, defaults filled in.
func (b *logBucket) budget() (perSecond, burst int64) {
	perSecond, burst = b.perSecond, b.burst
	if perSecond == 0 {
		perSecond = DefaultLogBytesPerSecond
	}
	if burst <= 0 {
		burst = DefaultLogBurstBytes
	}
	return perSecond, burst
}

// SetLogBudget sets the plugin's log budget: bytes a second on average
// and at once (a burst); zero takes the default (DefaultLogBytesPerSecond,
// DefaultLogBurstBytes), a negative perSecond is unlimited. A line costs
// its message, its attributes and logLineOverhead.
func (s *Stats) SetLogBudget(perSecond, burst int64) {
	s.logs.mu.Lock()
	s.logs.perSecond, s.logs.burst = perSecond, burst
	s.logs.mu.Unlock()
}

// LogBudget returns the plugin's log budget (SetLogBudget), defaults
// filled in.
func (s *Stats) LogBudget() (perSecond, burst int64) {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	return s.logs.budget()
}

// logFor writes a line about c's plugin (a guest's line, or the host's
// own about a refused call) within the plugin's log budget (admitLine).
func (c *Caller) logFor(ctx context.Context, level slog.Level, msg string, args ...any) {
	if c.admitLine(lineCost(len(msg), args)) {
		c.Logger.Log(ctx, level, msg, args...)
	}
}

// lineCost is what a line of a msgLen-byte message with args costs of
// the log budget: the message, the string attributes and logLineOverhead.
func lineCost(msgLen int, args []any) int {
	cost := msgLen + logLineOverhead
	for _, a := range args {
		if s, ok := a.(string); ok {
			cost += len(s)
		}
	}
	return cost
}

// admitLine charges a line of cost bytes to c's plugin's log budget and
// reports whether it may be written: over the budget it is dropped, and a
// note says how many were, at most every logNoteEvery.
func (c *Caller) admitLine(cost int) bool {
	ok, note, lines, bytes := c.Stats.admitLog(cost, time.Now())
	if note {
		rate, burst := c.Stats.LogBudget()
		c.Logger.Warn("plugin log lines dropped: over the plugin's log budget", "plugin", c.Plugin,
			"dropped_lines", lines, "dropped_bytes", bytes, "budget_bytes_per_second", rate, "burst_bytes", burst)
	}
	return ok
}

// logFunction writes a guest's line: cut at cfg.MaxLogBytes (on a
// character boundary, with an ellipsis), charged to the plugin's log
// budget before anything is copied out of its memory, so a line dropped
// costs no copy.
func logFunction(cfg Config) callback {
	const ellipsis = "…"
	return func(ctx context.Context, stack []uint64) {
		c := callerFrom(ctx)
		if c.beginLog() != nil {
			return // dropped: the call is over budget
		}
		b, _, err := blockView(ctx, stack[1])
		if err != nil {
			panic(fmt.Sprintf("hostfn log: abi violation: message pointer %#x: %v", stack[1], err))
		}
		cut, tail := len(b), ""
		if cut > cfg.MaxLogBytes {
			cut, tail = cfg.MaxLogBytes, ellipsis
			for k := 1; k < utf8.UTFMax && cut > 0 && !utf8.RuneStart(b[cut]); k++ {
				cut-- // not within a character
			}
		}
		args := []any{"plugin", c.Plugin, "plugin_version", c.Version, "partition", c.Tag, "source", "guest"}
		if !c.admitLine(lineCost(cut+len(tail), args)) {
			return
		}
		level := guestLevel(ctx, slog.Level(int32(uint32(stack[0]))))
		c.Logger.Log(ctx, level, string(b[:cut])+tail, args...)
	}
}

// guestLevel is the level a guest's log line is written at: a warning or
// error from a call the host itself cut (its stop, or the plugin's
// unload, cancelled the call's context: the guest then sees its host
// calls fail with "context canceled") is no failure of the plugin's and
// is written at debug. A call that ran out of time (its deadline) still
// warns, as does anything a live call logs.
func guestLevel(ctx context.Context, level slog.Level) slog.Level {
	if level >= slog.LevelWarn && errors.Is(ctx.Err(), context.Canceled) {
		return slog.LevelDebug
	}
	return level
}
