package valkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
)

// The Valkey layout of a periodic schedule (what the periodic scanner
// plugin reads): the definition hash ff:periodic:{fp:N}:<name> on its
// lane's solo partition, the partition's index zset of schedule names
// scored by their next tick, and the registry hash name → lane that finds
// a schedule's partition from its name.

// AddPeriodic implements backend.PeriodicDriver: a schedule of the same
// name on another lane is removed first; the definition and index entry
// are written in one MULTI.
func (d *Driver) AddPeriodic(ctx context.Context, s *backend.PeriodicSchedule) error {
	if err := periodic.ValidateName(s.Name); err != nil {
		return fmt.Errorf("add periodic: %w: %w", backend.ErrInvalidInput, err)
	}
	if s.LaneID == "" || (s.EveryMs <= 0) == (s.Cron == "") {
		return fmt.Errorf("add periodic %s: %w: a lane and exactly one of every and cron", s.Name, backend.ErrInvalidInput)
	}
	if err := d.removePeriodic(ctx, s.Name, s.LaneID); err != nil && !errors.Is(err, backend.ErrPeriodicNotFound) {
		return err
	}
	tags := "{}"
	if len(s.Tags) > 0 {
		b, _ := json.Marshal(s.Tags) // map[string]string always marshals
		tags = string(b)
	}
	every := ""
	if s.EveryMs > 0 {
		every = strconv.FormatInt(s.EveryMs, 10)
	}
	policy := s.PolicyJSON
	if policy == "" {
		policy = "{}"
	}
	raw := d.c.Raw()
	pk := model.KeysOn(d.parts.SoloPartition(s.LaneID))
	def := pk.PeriodicSchedule(s.Name)
	ms := func(v int64) string { return strconv.FormatInt(v, 10) }
	res := raw.DoMulti(ctx,
		raw.B().Sadd().Key(model.KeyLanesIndex).Member(s.LaneID).Build(),
		raw.B().Multi().Build(),
		raw.B().Del().Key(def).Build(),
		raw.B().Hset().Key(def).FieldValue().
			FieldValue(periodic.FieldName, s.Name).FieldValue(periodic.FieldLane, s.LaneID).
			FieldValue(periodic.FieldKind, s.ExecutionKind).FieldValue(periodic.FieldNamespace, s.Namespace).
			FieldValue(periodic.FieldPayload, string(s.Payload)).
			FieldValue(periodic.FieldPriority, strconv.Itoa(s.Priority)).
			FieldValue(periodic.FieldPolicy, policy).
			FieldValue(periodic.FieldTags, tags).FieldValue(periodic.FieldEveryMs, every).
			FieldValue(periodic.FieldCron, s.Cron).
			FieldValue(periodic.FieldAnchorMs, ms(s.AnchorMs)).
			FieldValue(periodic.FieldNextDueMs, ms(s.NextDueMs)).
			FieldValue(periodic.FieldCreatedAtMs, ms(s.CreatedAtMs)).
			FieldValue(periodic.FieldCreator, s.Creator).Build(),
		raw.B().Zadd().Key(pk.PeriodicIndex()).ScoreMember().ScoreMember(float64(s.NextDueMs), s.Name).Build(),
		raw.B().Exec().Build(),
		raw.B().Hset().Key(model.KeyPeriodicRegistry).FieldValue().FieldValue(s.Name, s.LaneID).Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return fmt.Errorf("add periodic %s: %w", s.Name, err)
		}
	}
	return nil
}

// RemovePeriodic implements backend.PeriodicDriver.
func (d *Driver) RemovePeriodic(ctx context.Context, name string) error {
	if err := periodic.ValidateName(name); err != nil {
		return fmt.Errorf("remove periodic: %w: %w", backend.ErrInvalidInput, err)
	}
	return d.removePeriodic(ctx, name, "")
}

// removePeriodic deletes name's definition, index entry and registry
// entry wherever the registry says it lives, unless that is keepLane
// (AddPeriodic then overwrites it in place). A name the registry does not
// hold is ErrPeriodicNotFound.
func (d *Driver) removePeriodic(ctx context.Context, name, keepLane string) error {
	raw := d.c.Raw()
	lane, err := raw.Do(ctx, raw.B().Hget().Key(model.KeyPeriodicRegistry).Field(name).Build()).ToString()
	if vk.IsValkeyNil(err) || (err == nil && lane == "") {
		return fmt.Errorf("remove periodic %s: %w", name, backend.ErrPeriodicNotFound)
	}
	if err != nil {
		return fmt.Errorf("remove periodic %s: read the registry: %w", name, err)
	}
	if lane == keepLane {
		return nil
	}
	pk := model.KeysOn(d.parts.SoloPartition(lane))
	for _, r := range raw.DoMulti(ctx,
		raw.B().Multi().Build(),
		raw.B().Del().Key(pk.PeriodicSchedule(name)).Build(),
		raw.B().Zrem().Key(pk.PeriodicIndex()).Member(name).Build(),
		raw.B().Exec().Build(),
		raw.B().Hdel().Key(model.KeyPeriodicRegistry).Field(name).Build()) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("remove periodic %s: %w", name, err)
		}
	}
	return nil
}

// ListPeriodic implements backend.PeriodicDriver: the registry, then every
// definition in one pipeline.
func (d *Driver) ListPeriodic(ctx context.Context) ([]backend.PeriodicSchedule, error) {
	raw := d.c.Raw()
	reg, err := raw.Do(ctx, raw.B().Hgetall().Key(model.KeyPeriodicRegistry).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("list periodic: read the registry: %w", err)
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
		cmds[i] = raw.B().Hgetall().Key(model.KeysOn(d.parts.SoloPartition(reg[n])).PeriodicSchedule(n)).Build()
	}
	out := make([]backend.PeriodicSchedule, 0, len(names))
	for i, r := range raw.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("list periodic: read %s: %w", names[i], err)
		}
		if len(m) == 0 {
			continue // removed meanwhile
		}
		out = append(out, scheduleOf(m))
	}
	return out, nil
}

// scheduleOf decodes a definition hash.
func scheduleOf(m map[string]string) backend.PeriodicSchedule {
	num := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	prio, _ := strconv.Atoi(m[periodic.FieldPriority])
	s := backend.PeriodicSchedule{Name: m[periodic.FieldName], LaneID: m[periodic.FieldLane],
		ExecutionKind: m[periodic.FieldKind], Namespace: m[periodic.FieldNamespace], Payload: []byte(m[periodic.FieldPayload]),
		Priority: prio, PolicyJSON: m[periodic.FieldPolicy], EveryMs: num(periodic.FieldEveryMs), Cron: m[periodic.FieldCron],
		AnchorMs: num(periodic.FieldAnchorMs), NextDueMs: num(periodic.FieldNextDueMs), LastTickMs: num(periodic.FieldLastTickMs),
		LastExecutionID: model.ExecutionID(m[periodic.FieldLastExecutionID]), CreatedAtMs: num(periodic.FieldCreatedAtMs),
		Creator: m[periodic.FieldCreator]}
	if t := m[periodic.FieldTags]; t != "" && t != "{}" {
		_ = json.Unmarshal([]byte(t), &s.Tags) // written by AddPeriodic; garbage means no tags
	}
	return s
}

// FirePeriodic implements backend.PeriodicDriver as the periodic scanner
// plugin does: the partition's due schedules (index, then their
// definitions in one pipeline), and for each due tick
// (periodic.Timing.Steps) ff_create_execution of the tick's execution
// (periodic.TickID, so a second firer's create is a DUPLICATE) pipelined
// with fabric_periodic_advance, the compare-and-set that moves the
// schedule only from that tick. Fired lists the executions this call's
// creates made.
func (d *Driver) FirePeriodic(ctx context.Context, p *backend.FirePeriodicParams) (*backend.FirePeriodicResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	if int(p.Partition) >= int(d.parts.Flow) {
		return nil, fmt.Errorf("fire periodic: %w: partition %d of %d", backend.ErrInvalidInput, p.Partition, d.parts.Flow)
	}
	part := model.Partition{Family: model.FamilyFlow, Index: p.Partition}
	pk := model.KeysOn(part)
	raw := d.c.Raw()
	due, err := raw.Do(ctx, raw.B().Zrange().Key(pk.PeriodicIndex()).Min("-inf").Max(strconv.FormatInt(p.NowMs, 10)).
		Byscore().Limit(0, int64(limit)).Withscores().Build()).AsZScores()
	if err != nil {
		return nil, fmt.Errorf("fire periodic: read the index: %w", err)
	}
	res := &backend.FirePeriodicResult{}
	var errs []error
	if len(due) > 0 {
		cmds := make(vk.Commands, len(due))
		for i, z := range due {
			cmds[i] = raw.B().Hgetall().Key(pk.PeriodicSchedule(z.Member)).Build()
		}
		for i, r := range raw.DoMulti(ctx, cmds...) {
			def, err := r.AsStrMap()
			if err != nil {
				errs = append(errs, fmt.Errorf("fire periodic %s: %w", due[i].Member, err))
				continue
			}
			fired, err := d.fireSchedule(ctx, part, due[i].Member, int64(due[i].Score), def, p.NowMs)
			res.Fired = append(res.Fired, fired...)
			if err != nil {
				errs = append(errs, fmt.Errorf("fire periodic %s: %w", due[i].Member, err))
			}
		}
	}
	next, err := raw.Do(ctx, raw.B().Zrange().Key(pk.PeriodicIndex()).Min("0").Max("0").Withscores().Build()).AsZScores()
	if err != nil {
		errs = append(errs, fmt.Errorf("fire periodic: next due: %w", err))
	} else if len(next) > 0 {
		res.NextDueMs = int64(next[0].Score)
	}
	return res, errors.Join(errs...)
}

// fireSchedule fires the due ticks of one schedule whose index entry says
// tick, pairing each create with its advance.
func (d *Driver) fireSchedule(ctx context.Context, part model.Partition, name string, tick int64, def map[string]string, now int64) ([]model.ExecutionID, error) {
	pk := model.KeysOn(part)
	advance := func(tick, next int64) Call {
		eid := periodic.TickID(part, name, tick)
		return Call{Function: "fabric_periodic_advance",
			Keys: []string{pk.PeriodicSchedule(name), pk.PeriodicIndex(), model.KeysFor(eid).Core()},
			Args: []string{name, strconv.FormatInt(tick, 10), strconv.FormatInt(next, 10), string(eid)}}
	}
	if len(def) == 0 {
		// Removed since the index read: the advance drops the entry.
		r := d.c.FCallBatch(ctx, []Call{advance(tick, 0)})
		return nil, r[0].Err
	}
	timing, err := periodic.TimingOf(def)
	if err != nil {
		r := d.c.FCallBatch(ctx, []Call{advance(tick, 0)})
		return nil, errors.Join(fmt.Errorf("unreadable timing, removed from the index: %w", err), r[0].Err)
	}
	if def[periodic.FieldNextDueMs] != strconv.FormatInt(tick, 10) {
		return nil, nil // index and hash disagree mid-update; the next call sees both
	}
	s := scheduleOf(def)
	var fired []model.ExecutionID
	for _, st := range timing.Steps(tick, now) {
		eid := periodic.TickID(part, name, st.Tick)
		tags := make(map[string]string, len(s.Tags)+2)
		for k, v := range s.Tags {
			tags[k] = v
		}
		tags[periodic.TagSchedule] = name
		tags[periodic.TagTick] = strconv.FormatInt(st.Tick, 10)
		create := (&CreateExecutionParams{ExecutionID: eid, Namespace: s.Namespace, LaneID: s.LaneID,
			ExecutionKind: s.ExecutionKind, Priority: s.Priority, CreatorIdentity: periodic.Creator,
			PolicyJSON: s.PolicyJSON, Payload: string(s.Payload), Tags: tags}).Call()
		r := d.c.FCallBatch(ctx, []Call{create, advance(st.Tick, st.Next)})
		if r[0].Err != nil {
			return fired, fmt.Errorf("create tick %d: %w", st.Tick, r[0].Err)
		}
		if r[0].Reply.Status != StatusDuplicate {
			fired = append(fired, eid)
		}
		if r[1].Err != nil {
			return fired, fmt.Errorf("advance from tick %d: %w", st.Tick, r[1].Err)
		}
		if r[1].Reply.Field(0) != "advanced" {
			break // another firer moved it, or it was removed
		}
	}
	return fired, nil
}
