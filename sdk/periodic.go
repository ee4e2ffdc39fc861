package sdk

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	vk "github.com/valkey-io/valkey-go"

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
	if pd, ok := c.drv.(backend.PeriodicDriver); ok {
		// Postgres: the backend contract stores it (fabric_periodic).
		if err := pd.AddPeriodic(ctx, &backend.PeriodicSchedule{Name: p.Name, LaneID: spec.Lane,
			ExecutionKind: spec.Kind, Namespace: ns, Payload: spec.Payload, Priority: spec.Priority,
			PolicyJSON: policyJSON(spec.Priority, 0, spec.Policy), Tags: spec.Tags,
			EveryMs: timing.Every.Milliseconds(), Cron: timing.Cron, AnchorMs: now, NextDueMs: next,
			CreatedAtMs: now, Creator: c.who}); err != nil {
			return nil, fmt.Errorf("sdk: %w", err)
		}
		return info, nil
	}
	if err := c.removePeriodic(ctx, p.Name, spec.Lane); err != nil {
		return nil, err
	}
	if err := c.registerLane(ctx, spec.Lane); err != nil {
		return nil, err
	}
	part := c.parts.SoloPartition(spec.Lane)
	pk := model.KeysOn(part)
	tags := "{}"
	if len(spec.Tags) > 0 {
		b, _ := json.Marshal(spec.Tags) // map[string]string always marshals
		tags = string(b)
	}
	every := ""
	if timing.Every > 0 {
		every = strconv.FormatInt(timing.Every.Milliseconds(), 10)
	}
	raw := c.vc.Raw()
	def := pk.PeriodicSchedule(p.Name)
	res := raw.DoMulti(ctx,
		raw.B().Multi().Build(),
		raw.B().Del().Key(def).Build(),
		raw.B().Hset().Key(def).FieldValue().
			FieldValue(periodic.FieldName, p.Name).FieldValue(periodic.FieldLane, spec.Lane).
			FieldValue(periodic.FieldKind, spec.Kind).FieldValue(periodic.FieldNamespace, ns).
			FieldValue(periodic.FieldPayload, string(spec.Payload)).
			FieldValue(periodic.FieldPriority, strconv.Itoa(spec.Priority)).
			FieldValue(periodic.FieldPolicy, policyJSON(spec.Priority, 0, spec.Policy)).
			FieldValue(periodic.FieldTags, tags).FieldValue(periodic.FieldEveryMs, every).
			FieldValue(periodic.FieldCron, timing.Cron).
			FieldValue(periodic.FieldAnchorMs, strconv.FormatInt(now, 10)).
			FieldValue(periodic.FieldNextDueMs, strconv.FormatInt(next, 10)).
			FieldValue(periodic.FieldCreatedAtMs, strconv.FormatInt(now, 10)).
			FieldValue(periodic.FieldCreator, c.who).Build(),
		raw.B().Zadd().Key(pk.PeriodicIndex()).ScoreMember().ScoreMember(float64(next), p.Name).Build(),
		raw.B().Exec().Build(),
		raw.B().Hset().Key(model.KeyPeriodicRegistry).FieldValue().FieldValue(p.Name, spec.Lane).Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return nil, fmt.Errorf("sdk: add periodic %s: %w", p.Name, err)
		}
	}
	return info, nil
}

// RemovePeriodic deletes a schedule; executions it already created are
// not touched. Removing a missing name returns an error wrapping
// ErrPeriodicNotFound.
func (c *Client) RemovePeriodic(ctx context.Context, name string) error {
	if err := periodic.ValidateName(name); err != nil {
		return invalid("periodic.name", "%v", err)
	}
	if pd, ok := c.drv.(backend.PeriodicDriver); ok {
		err := pd.RemovePeriodic(ctx, name)
		if errors.Is(err, backend.ErrPeriodicNotFound) {
			return fmt.Errorf("%w: %s", ErrPeriodicNotFound, name)
		}
		if err != nil {
			return fmt.Errorf("sdk: %w", err)
		}
		return nil
	}
	raw := c.vc.Raw()
	lane, err := raw.Do(ctx, raw.B().Hget().Key(model.KeyPeriodicRegistry).Field(name).Build()).ToString()
	if err != nil || lane == "" {
		if err == nil || vk.IsValkeyNil(err) {
			return fmt.Errorf("%w: %s", ErrPeriodicNotFound, name)
		}
		return fmt.Errorf("sdk: remove periodic %s: %w", name, err)
	}
	return c.removePeriodic(ctx, name, "")
}

// removePeriodic deletes name's definition and index entry wherever the
// registry says it lives, unless that is keepLane (AddPeriodic overwrites
// it in place then).
func (c *Client) removePeriodic(ctx context.Context, name, keepLane string) error {
	raw := c.vc.Raw()
	lane, err := raw.Do(ctx, raw.B().Hget().Key(model.KeyPeriodicRegistry).Field(name).Build()).ToString()
	if vk.IsValkeyNil(err) || (err == nil && (lane == "" || lane == keepLane)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sdk: read periodic registry: %w", err)
	}
	pk := model.KeysOn(c.parts.SoloPartition(lane))
	for _, r := range raw.DoMulti(ctx,
		raw.B().Multi().Build(),
		raw.B().Del().Key(pk.PeriodicSchedule(name)).Build(),
		raw.B().Zrem().Key(pk.PeriodicIndex()).Member(name).Build(),
		raw.B().Exec().Build(),
		raw.B().Hdel().Key(model.KeyPeriodicRegistry).Field(name).Build()) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("sdk: remove periodic %s: %w", name, err)
		}
	}
	return nil
}

// ListPeriodic returns every schedule, sorted by name.
func (c *Client) ListPeriodic(ctx context.Context) ([]PeriodicInfo, error) {
	if pd, ok := c.drv.(backend.PeriodicDriver); ok {
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
	raw := c.vc.Raw()
	reg, err := raw.Do(ctx, raw.B().Hgetall().Key(model.KeyPeriodicRegistry).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("sdk: read periodic registry: %w", err)
	}
	names := make([]string, 0, len(reg))
	for n := range reg {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, nil
	}
	cmds := make(vk.Commands, len(names))
	for i, n := range names {
		cmds[i] = raw.B().Hgetall().Key(model.KeysOn(c.parts.SoloPartition(reg[n])).PeriodicSchedule(n)).Build()
	}
	out := make([]PeriodicInfo, 0, len(names))
	for i, r := range raw.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("sdk: read periodic %s: %w", names[i], err)
		}
		if len(m) == 0 {
			continue // removed meanwhile
		}
		out = append(out, periodicInfo(m))
	}
	return out, nil
}

func msTime(s string) time.Time {
	ms, _ := strconv.ParseInt(s, 10, 64)
	return msTimeOf(ms)
}

// msTimeOf is ms as a time, zero for ms <= 0.
func msTimeOf(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func periodicInfo(m map[string]string) PeriodicInfo {
	every, _ := strconv.ParseInt(m[periodic.FieldEveryMs], 10, 64)
	return PeriodicInfo{Name: m[periodic.FieldName], Kind: m[periodic.FieldKind], Lane: m[periodic.FieldLane],
		Namespace: m[periodic.FieldNamespace], Every: time.Duration(every) * time.Millisecond,
		Cron: m[periodic.FieldCron], NextDue: msTime(m[periodic.FieldNextDueMs]),
		LastTick: msTime(m[periodic.FieldLastTickMs]), LastExecutionID: model.ExecutionID(m[periodic.FieldLastExecutionID])}
}
