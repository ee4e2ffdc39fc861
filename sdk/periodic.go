package sdk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
)

// Periodic describes a periodic schedule: an execution of Kind with
// Payload is created on every tick, by the periodic scanner plugin of the
// running hosts (exactly one per tick however many hosts run).
type Periodic struct {
	// Name identifies the schedule: 1..128 bytes of letters, digits and
	// "._:-". Adding a name again replaces that schedule.
	Name string
	// Every is a fixed interval (at least 100ms), ticking from the time
	// the schedule is added. Set Every or Cron, not both.
	Every time.Duration
	// Cron is a standard 5-field cron expression (minute hour
	// day-of-month month day-of-week) or a descriptor (@hourly,
	// @every 90s), evaluated in UTC.
	Cron string
	// Kind and Payload are those of each created execution.
	Kind    string
	Payload []byte
}

// PeriodicInfo is a stored schedule as ListPeriodic reports it.
type PeriodicInfo struct {
	Name, Kind, Lane, Namespace string
	// Every or Cron, as added.
	Every time.Duration
	Cron  string
	// NextDue is the next tick (zero when the schedule has none left).
	NextDue time.Time
	// LastTick and LastExecutionID describe the last fired tick (zero
	// and empty before the first).
	LastTick        time.Time
	LastExecutionID model.ExecutionID
}

// ErrPeriodicNotFound is returned (wrapped) for a schedule name that does
// not exist.
var ErrPeriodicNotFound = errors.New("sdk: periodic schedule not found")

// AddPeriodic stores a periodic schedule (replacing one of the same name)
// and returns it with its first tick. opts shape every created execution
// as for Enqueue (lane, priority, capabilities, retry, attempt timeout,
// tags, namespace); the options that only make sense once (delay, run-at,
// idempotency key, deadline) are refused. Everything is validated before
// any network call.
//
// Ticks fire only where hosts run the periodic plugin (a default plugin of
// `fabric run`). A tick fires late rather than never when hosts fall
// behind by less than a minute; after a longer outage the overdue tick
// fires once and the schedule continues from now.
func (c *Client) AddPeriodic(ctx context.Context, p Periodic, opts ...EnqueueOption) (*PeriodicInfo, error) {
	if err := periodic.ValidateName(p.Name); err != nil {
		return nil, invalid("periodic.name", "%v", err)
	}
	now := c.clock().UnixMilli()
	timing, err := periodic.ParseTiming(p.Every, now, p.Cron)
	if err != nil {
		return nil, invalid("periodic.timing", "%v", err)
	}
	spec, err := BuildSpec(p.Kind, p.Payload, opts...)
	if err != nil {
		return nil, err
	}
	if spec.Delay != 0 || !spec.RunAt.IsZero() || spec.IdempotencyKey != "" || (spec.Policy != nil && !spec.Policy.Deadline.IsZero()) {
		return nil, invalid("periodic.options", "delay, run-at, idempotency key and deadline do not apply to a periodic schedule")
	}
	next := timing.Next(now)
	if next == 0 {
		return nil, invalid("periodic.timing", "cron %q never fires", p.Cron)
	}
	ns := cmp.Or(spec.Namespace, c.ns)
	info := &PeriodicInfo{Name: p.Name, Kind: spec.Kind, Lane: spec.Lane, Namespace: ns, Every: timing.Every,
		Cron: timing.Cron, NextDue: time.UnixMilli(next)}
	pd, err := c.periodicDriver()
	if err != nil {
		return nil, err
	}
	if err := pd.AddPeriodic(ctx, &backend.PeriodicSchedule{Name: p.Name, LaneID: spec.Lane,
		ExecutionKind: spec.Kind, Namespace: ns, Payload: spec.Payload, Priority: spec.Priority,
		PolicyJSON: policyJSON(spec.Priority, 0, spec.Policy), Tags: spec.Tags,
		EveryMs: timing.Every.Milliseconds(), Cron: timing.Cron, AnchorMs: now, NextDueMs: next,
		CreatedAtMs: now, Creator: c.who}); err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return info, nil
}

// periodicDriver is the client's backend as a backend.PeriodicDriver
// (both drivers implement it).
func (c *Client) periodicDriver() (backend.PeriodicDriver, error) {
	pd, ok := c.drv.(backend.PeriodicDriver)
	if !ok {
		return nil, fmt.Errorf("sdk: the %s backend has no periodic schedules", c.drv.Name())
	}
	return pd, nil
}

// RemovePeriodic deletes a schedule; executions it already created are
// not touched. Removing a missing name returns an error wrapping
// ErrPeriodicNotFound.
func (c *Client) RemovePeriodic(ctx context.Context, name string) error {
	if err := periodic.ValidateName(name); err != nil {
		return invalid("periodic.name", "%v", err)
	}
	pd, err := c.periodicDriver()
	if err != nil {
		return err
	}
	err = pd.RemovePeriodic(ctx, name)
	if errors.Is(err, backend.ErrPeriodicNotFound) {
		return fmt.Errorf("%w: %s", ErrPeriodicNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("sdk: %w", err)
	}
	return nil
}

// ListPeriodic returns every schedule, sorted by name.
func (c *Client) ListPeriodic(ctx context.Context) ([]PeriodicInfo, error) {
	pd, err := c.periodicDriver()
	if err != nil {
		return nil, err
	}
	ss, err := pd.ListPeriodic(ctx)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	var out []PeriodicInfo
	for _, s := range ss {
		out = append(out, PeriodicInfo{Name: s.Name, Kind: s.ExecutionKind, Lane: s.LaneID, Namespace: s.Namespace,
			Every: time.Duration(s.EveryMs) * time.Millisecond, Cron: s.Cron, NextDue: msTimeOf(s.NextDueMs),
			LastTick: msTimeOf(s.LastTickMs), LastExecutionID: s.LastExecutionID})
	}
	return out, nil
}

// msTimeOf is ms as a time, zero for ms <= 0.
func msTimeOf(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
