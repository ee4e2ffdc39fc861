// Package periodic holds what the SDK (which writes periodic schedules)
// and the periodic scanner plugin (which fires them) must agree on: the
// fields of a schedule hash, how a timing (fixed interval or cron
// expression) computes its next tick, and the execution id of a tick.
//
// It builds for wasip1: no network, no time zones beyond UTC.
package periodic

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/fabric-host/fabric/model"
)

// Fields of a schedule hash (model.PartitionKeys.PeriodicSchedule).
const (
	FieldName      = "name"
	FieldLane      = "lane"
	FieldKind      = "kind"
	FieldNamespace = "namespace"
	FieldPayload   = "payload"
	FieldPriority  = "priority"
	// FieldPolicy is the ExecutionPolicy JSON each execution is created
	// with.
	FieldPolicy = "policy"
	// FieldTags is a JSON object of tags each execution gets.
	FieldTags = "tags"
	// FieldEveryMs and FieldCron: exactly one is set.
	FieldEveryMs = "every_ms"
	FieldCron    = "cron"
	// FieldAnchorMs is the origin of a fixed interval's ticks.
	FieldAnchorMs = "anchor_ms"
	// FieldNextDueMs is the next tick (also the schedule's score in the
	// index); fabric_periodic_advance moves it.
	FieldNextDueMs = "next_due_ms"
	// FieldLastTickMs and FieldLastExecutionID record the last fired tick.
	FieldLastTickMs      = "last_tick_ms"
	FieldLastExecutionID = "last_execution_id"
	FieldCreatedAtMs     = "created_at_ms"
	FieldCreator         = "creator"
)

// Creator is the creator_identity of the executions a schedule fires.
const Creator = "fabric-periodic"

// Tags every fired execution carries (besides the schedule's own).
const (
	TagSchedule = "fabric.periodic"
	TagTick     = "fabric.periodic_tick_ms"
)

// Limits.
const (
	// NameMaxBytes bounds a schedule name.
	NameMaxBytes = 128
	// MinEvery is the shortest fixed interval.
	MinEvery = 100 * time.Millisecond
	// CatchUp is how late a tick may fire: ticks missed by less (a slow
	// or briefly stopped host) fire one by one, late; older ones (an
	// outage) are skipped, and the schedule resumes at the first tick
	// after now.
	CatchUp = time.Minute
)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("periodic: invalid schedule")

// ValidateName checks a schedule name: 1..128 bytes of letters, digits and
// "._:-" (it is part of a key and of CLI output).
func ValidateName(name string) error {
	if name == "" || len(name) > NameMaxBytes {
		return fmt.Errorf("%w: name must be 1..%d bytes (got %d)", ErrInvalid, NameMaxBytes, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
			return fmt.Errorf("%w: name %q: byte %q is not a letter, digit or one of ._:-", ErrInvalid, name, c)
		}
	}
	return nil
}

// Timing is when a schedule fires: every Every from an anchor, or on a
// 5-field cron expression evaluated in UTC.
type Timing struct {
	// Every is the fixed interval (0 with a cron expression).
	Every time.Duration
	// AnchorMs is the origin of fixed-interval ticks (ticks are
	// AnchorMs + k·Every).
	AnchorMs int64
	// Cron is the cron expression ("" with a fixed interval).
	Cron  string
	sched cron.Schedule
}

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseTiming validates a timing: exactly one of every (>= MinEvery) and
// expr (standard 5-field cron — minute hour day-of-month month
// day-of-week — or a descriptor such as @hourly / @every 5m; always UTC,
// so a CRON_TZ= or TZ= prefix is refused).
func ParseTiming(every time.Duration, anchorMs int64, expr string) (Timing, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case every != 0 && expr != "":
		return Timing{}, fmt.Errorf("%w: set an interval or a cron expression, not both", ErrInvalid)
	case every == 0 && expr == "":
		return Timing{}, fmt.Errorf("%w: an interval or a cron expression is required", ErrInvalid)
	case expr == "":
		if every < MinEvery {
			return Timing{}, fmt.Errorf("%w: interval %s is shorter than %s", ErrInvalid, every, MinEvery)
		}
		if every%time.Millisecond != 0 {
			return Timing{}, fmt.Errorf("%w: interval %s is not a whole number of milliseconds", ErrInvalid, every)
		}
		return Timing{Every: every, AnchorMs: anchorMs}, nil
	}
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		return Timing{}, fmt.Errorf("%w: cron %q: time zones are not supported (schedules run in UTC)", ErrInvalid, expr)
	}
	s, err := parser.Parse("CRON_TZ=UTC " + expr)
	if err != nil {
		return Timing{}, fmt.Errorf("%w: cron %q: %v", ErrInvalid, expr, err)
	}
	return Timing{Cron: expr, sched: s}, nil
}

// Next returns the first tick strictly after afterMs (ms), or 0 when a
// cron expression has none (e.g. February 30th).
func (t Timing) Next(afterMs int64) int64 {
	if t.sched == nil {
		ev := t.Every.Milliseconds()
		if ev <= 0 {
			return 0
		}
		if afterMs < t.AnchorMs {
			return t.AnchorMs
		}
		return t.AnchorMs + ((afterMs-t.AnchorMs)/ev+1)*ev
	}
	n := t.sched.Next(time.UnixMilli(afterMs).UTC())
	if n.IsZero() {
		return 0
	}
	return n.UnixMilli()
}

// After returns the tick that follows tickMs once it has fired at nowMs:
// the next tick, unless that one is more than CatchUp old, then the first
// tick after nowMs. 0 means none.
func (t Timing) After(tickMs, nowMs int64) int64 {
	next := t.Next(tickMs)
	if next != 0 && next < nowMs-CatchUp.Milliseconds() {
		return t.Next(nowMs)
	}
	return next
}

// TimingOf reads the timing of a schedule hash.
func TimingOf(def map[string]string) (Timing, error) {
	var every time.Duration
	if v := def[FieldEveryMs]; v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Timing{}, fmt.Errorf("%w: %s %q", ErrInvalid, FieldEveryMs, v)
		}
		every = time.Duration(ms) * time.Millisecond
	}
	anchor, _ := strconv.ParseInt(def[FieldAnchorMs], 10, 64)
	return ParseTiming(every, anchor, def[FieldCron])
}

// TickID is the execution id of schedule name's tick at tickMs on
// partition p: the same on every host, so creating it twice creates one
// execution (ff_create_execution answers DUPLICATE for an existing id).
// The UUID is a version-8 (name-based, SHA-256) UUID.
func TickID(p model.Partition, name string, tickMs int64) model.ExecutionID {
	sum := sha256.Sum256([]byte("fabric.periodic\x00" + name + "\x00" + strconv.FormatInt(tickMs, 10)))
	var u model.UUID
	copy(u[:], sum[:16])
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	return model.NewExecutionID(p, u)
}

// MaxTicksPerScan bounds the overdue ticks of one schedule fired by one
// scan (a host catching up after a stall); the rest fire on the next.
const MaxTicksPerScan = 16

// Step is one tick to fire and the tick the schedule moves to after it
// (0: none left).
type Step struct{ Tick, Next int64 }

// Steps returns the ticks of a schedule at tick to fire at nowMs, in
// order, each with its successor (Timing.After): tick itself, then each
// successor already due, at most MaxTicksPerScan.
func (t Timing) Steps(tick, nowMs int64) []Step {
	var out []Step
	for len(out) < MaxTicksPerScan {
		next := t.After(tick, nowMs)
		out = append(out, Step{Tick: tick, Next: next})
		if next == 0 || next > nowMs {
			break
		}
		tick = next
	}
	return out
}
