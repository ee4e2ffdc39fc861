package valkey

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// exists checks eid has a core, so an action on an unknown id answers
// backend.backend.ErrNotFound rather than a Lua error.
func (d *Driver) exists(ctx context.Context, eid model.ExecutionID) (model.ExecutionID, error) {
	raw := d.c.Raw()
	n, err := raw.Do(ctx, raw.B().Exists().Key(model.KeysFor(eid).Core()).Build()).AsInt64()
	if err != nil {
		return "", fmt.Errorf("inspect: read %s: %w", eid, err)
	}
	if n == 0 {
		return "", fmt.Errorf("%w: execution %s", backend.ErrNotFound, eid)
	}
	return eid, nil
}

// conflict turns a flowfabric logical error into backend.ErrConflict.
func inspConflict(action string, err error) error {
	if code := CodeOf(err); code != "" {
		return fmt.Errorf("%w: %s refused: %s (%v)", backend.ErrConflict, action, code, err)
	}
	return fmt.Errorf("inspect: %s: %w", action, err)
}

// OperatorCancel implements backend.Inspector: it cancels an execution as an operator (source operator_override).
func (d *Driver) OperatorCancel(ctx context.Context, id model.ExecutionID, reason string) (*backend.ActionResult, error) {
	eid, err := d.exists(ctx, id)
	if err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "operator_cancel"
	}
	from, err := d.c.CancelExecution(ctx, &CancelExecutionParams{ExecutionID: eid, Reason: reason,
		Source: SourceOperatorOverride})
	if err != nil {
		return nil, inspConflict("cancel", err)
	}
	return &backend.ActionResult{ID: string(eid), Action: "cancel", Detail: map[string]any{"from": from, "reason": reason}}, nil
}

// OperatorReplay implements backend.Inspector: it re-runs a terminal execution (ff_replay_execution).
func (d *Driver) OperatorReplay(ctx context.Context, id model.ExecutionID) (*backend.ActionResult, error) {
	eid, err := d.exists(ctx, id)
	if err != nil {
		return nil, err
	}
	now, err := d.c.ServerTime(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: replay: %w", err)
	}
	n, err := d.c.ReplayExecution(ctx, eid, now)
	if err != nil {
		return nil, inspConflict("replay", err)
	}
	// The reply counts a replayed skipped flow member's edges still
	// unsatisfied (0 otherwise); what the replay made of the execution is
	// read back, in the words the Postgres console answers with.
	raw := d.c.Raw()
	f, err := raw.Do(ctx, raw.B().Hmget().Key(model.KeysFor(eid).Core()).Field("replay_count", "public_state").Build()).ToArray()
	if err != nil || len(f) != 2 {
		return nil, fmt.Errorf("inspect: replay %s: read back: %w", eid, err)
	}
	countText, _ := f[0].ToString()
	count, _ := strconv.ParseInt(countText, 10, 64)
	state, _ := f[1].ToString()
	return &backend.ActionResult{ID: string(eid), Action: "replay", Detail: map[string]any{"replay_count": count,
		"public_state": state, "unsatisfied_edges": n}}, nil
}

// OperatorPriority implements backend.Inspector: it changes an eligible execution's priority (0..9000).
func (d *Driver) OperatorPriority(ctx context.Context, id model.ExecutionID, priority int) (*backend.ActionResult, error) {
	if priority < 0 || priority > model.PriorityMax {
		return nil, fmt.Errorf("%w: priority must be 0..%d, got %d", backend.ErrInvalidInput, model.PriorityMax, priority)
	}
	eid, err := d.exists(ctx, id)
	if err != nil {
		return nil, err
	}
	r, err := d.c.ChangePriority(ctx, eid, priority)
	if err != nil {
		return nil, inspConflict("priority", err)
	}
	return &backend.ActionResult{ID: string(eid), Action: "priority", Detail: map[string]any{"old": r.Old, "new": r.New}}, nil
}

// OperatorSignal implements backend.Inspector: it delivers a signal to an execution's waitpoint. The admin server
// holds the keyspace, so it reads the waitpoint's token itself: the
// operator needs the admin token, not the waitpoint's.
func (d *Driver) OperatorSignal(ctx context.Context, id model.ExecutionID, s *backend.OperatorSignalParams) (*backend.ActionResult, error) {
	if s.Name == "" {
		return nil, fmt.Errorf("%w: a signal needs a name", backend.ErrInvalidInput)
	}
	eid, err := d.exists(ctx, id)
	if err != nil {
		return nil, err
	}
	raw := d.c.Raw()
	wp := s.WaitpointID
	if wp == "" {
		wp, err = raw.Do(ctx, raw.B().Hget().Key(model.KeysFor(eid).Core()).Field("current_waitpoint_id").Build()).ToString()
		if err != nil || wp == "" {
			return nil, fmt.Errorf("%w: signal refused: execution %s has no current waitpoint (not suspended)", backend.ErrConflict, eid)
		}
	}
	token, err := raw.Do(ctx, raw.B().Hget().Key(model.KeysOn(eid.Partition()).Waitpoint(wp)).Field("waitpoint_token").Build()).ToString()
	if err != nil || token == "" {
		return nil, fmt.Errorf("%w: waitpoint %s of %s", backend.ErrNotFound, wp, eid)
	}
	r, err := d.c.DeliverSignal(ctx, &SignalParams{SignalID: model.NewUUID().String(), ExecutionID: eid,
		WaitpointID: wp, SignalName: s.Name, SignalCategory: "external", SourceType: "operator",
		SourceIdentity: "fabric-admin", Payload: s.Payload, IdempotencyKey: s.IdempotencyKey, WaitpointToken: token})
	if err != nil {
		return nil, inspConflict("signal", err)
	}
	return &backend.ActionResult{ID: string(eid), Action: "signal", Detail: map[string]any{"signal_id": r.SignalID,
		"effect": r.Effect, "duplicate": r.Duplicate, "waitpoint_id": wp}}, nil
}

// SetLaneState would pause or resume a lane. FlowFabric defines lane
// states (active, paused, draining, disabled) as a type only: its Lua
// keeps no lane state on Valkey and no claim path reads one, so a pause
// here would not stop any worker. It checks the lane and returns
// backend.ErrUnsupported.
func (d *Driver) SetLaneState(ctx context.Context, lane, state string) error {
	lanes, err := d.laneNames(ctx)
	if err != nil {
		return err
	}
	if err := d.checkLane(lanes, lane); err != nil {
		return err
	}
	return fmt.Errorf("%w: lane %s cannot be %s: FlowFabric keeps no lane state on Valkey (no claim path reads one), so a pause would not stop its workers",
		backend.ErrUnsupported, lane, state)
}
