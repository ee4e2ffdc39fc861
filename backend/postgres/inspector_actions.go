package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// inspConflict turns a logical error of the Postgres backend into the
// console's errors: an unknown execution backend.ErrNotFound, a refusal by the
// execution's state backend.ErrConflict (409 with its code, as on Valkey).
func inspConflict(action string, eid model.ExecutionID, err error) error {
	var code ErrorCode
	switch {
	case errors.Is(err, CodeExecutionNotFound):
		return fmt.Errorf("%w: execution %s", backend.ErrNotFound, eid)
	case errors.As(err, &code):
		return fmt.Errorf("%w: %s refused: %s (%v)", backend.ErrConflict, action, code, err)
	}
	return inspectErrorf("%s: %w", action, err)
}

// OperatorCancel implements backend.Inspector: it cancels an execution as an operator (cancelled_by
// operator_override), leased or not; the detail names the phase it was
// cancelled from. A terminal execution is backend.ErrConflict.
func (d *Driver) OperatorCancel(ctx context.Context, eid model.ExecutionID, reason string) (*backend.ActionResult, error) {
	if _, err := inspKey(eid); err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "operator_cancel"
	}
	from, err := d.c.CancelExecution(ctx, &CancelExecutionParams{ExecutionID: eid, Reason: reason,
		Source: "operator_override"})
	if err != nil {
		return nil, inspConflict("cancel", eid, err)
	}
	return &backend.ActionResult{ID: string(eid), Action: "cancel", Detail: map[string]any{"from": from, "reason": reason}}, nil
}

// OperatorReplay implements backend.Inspector: it re-runs an ended execution (the Postgres backend's replay: back
// to waiting, its replay count up one). A flow member that was skipped or
// has downstream members is refused with backend.ErrUnsupported (see
// Client.ReplayExecution); one not ended is backend.ErrConflict.
func (d *Driver) OperatorReplay(ctx context.Context, eid model.ExecutionID) (*backend.ActionResult, error) {
	if _, err := inspKey(eid); err != nil {
		return nil, err
	}
	r, err := d.c.ReplayExecution(ctx, eid)
	if errors.Is(err, CodeInvalidInput) {
		return nil, fmt.Errorf("%w: replay on the Postgres backend: %v", backend.ErrUnsupported, err)
	}
	if err != nil {
		return nil, inspConflict("replay", eid, err)
	}
	return &backend.ActionResult{ID: string(eid), Action: "replay", Detail: map[string]any{"replay_count": r.ReplayCount,
		"public_state": r.PublicState}}, nil
}

// OperatorPriority implements backend.Inspector: it changes an eligible execution's priority (0..9000); one not
// runnable and eligible now is backend.ErrConflict.
func (d *Driver) OperatorPriority(ctx context.Context, eid model.ExecutionID, priority int) (*backend.ActionResult, error) {
	if priority < 0 || priority > model.PriorityMax {
		return nil, fmt.Errorf("%w: priority must be 0..%d, got %d", backend.ErrInvalidInput, model.PriorityMax, priority)
	}
	if _, err := inspKey(eid); err != nil {
		return nil, err
	}
	r, err := d.c.ChangePriority(ctx, eid, priority)
	if err != nil {
		return nil, inspConflict("priority", eid, err)
	}
	return &backend.ActionResult{ID: string(eid), Action: "priority", Detail: map[string]any{"old": r.Old, "new": r.New}}, nil
}

// OperatorSignal implements backend.Inspector: it delivers a signal to an execution's waitpoint (its current one
// unless the request names another). As on Valkey the console reads the
// waitpoint's token itself: the operator needs the admin token, not the
// waitpoint's.
func (d *Driver) OperatorSignal(ctx context.Context, eid model.ExecutionID, s *backend.OperatorSignalParams) (*backend.ActionResult, error) {
	if s.Name == "" {
		return nil, fmt.Errorf("%w: a signal needs a name", backend.ErrInvalidInput)
	}
	k, err := inspKey(eid)
	if err != nil {
		return nil, err
	}
	part, u := k.part, [16]byte(k.uuid)
	var phase string
	var current *string
	err = d.c.Pool().QueryRow(ctx, `SELECT lifecycle_phase, raw_fields->>'current_waitpoint_id' FROM ff_exec_core
 WHERE partition_key = $1 AND execution_id = $2`, part, u).Scan(&phase, &current)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: execution %s", backend.ErrNotFound, eid)
	}
	if err != nil {
		return nil, inspectErrorf("read %s: %w", eid, err)
	}
	wp := s.WaitpointID
	if wp == "" {
		// current_waitpoint_id outlives the suspension (its waitpoint is
		// closed on resume): only a suspended execution has one to signal.
		if phase != model.PhaseSuspended || current == nil || *current == "" {
			return nil, fmt.Errorf("%w: signal refused: execution %s has no current waitpoint (not suspended; phase %s)", backend.ErrConflict, eid, phase)
		}
		wp = *current
	}
	wu, err := model.ParseUUID(wp)
	if err != nil {
		return nil, fmt.Errorf("%w: waitpoint id %q: %v", backend.ErrInvalidInput, wp, err)
	}
	var token string
	err = d.c.Pool().QueryRow(ctx, `SELECT token FROM ff_waitpoint_pending
 WHERE partition_key = $1 AND waitpoint_id = $2 AND execution_id = $3`, part, [16]byte(wu), u).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: waitpoint %s of %s", backend.ErrNotFound, wp, eid)
	}
	if err != nil {
		return nil, inspectErrorf("read waitpoint %s of %s: %w", wp, eid, err)
	}
	var payload []byte // none: NULL, read back as a nil Payload
	if s.Payload != "" {
		payload = []byte(s.Payload)
	}
	r, err := d.c.DeliverSignal(ctx, &DeliverSignalParams{ExecutionID: eid, WaitpointID: wp, Token: token,
		SignalID: model.NewUUID().String(), Name: s.Name, Payload: payload, Source: "fabric-admin",
		IdempotencyKey: s.IdempotencyKey})
	if err != nil {
		return nil, inspConflict("signal", eid, err)
	}
	return &backend.ActionResult{ID: string(eid), Action: "signal", Detail: map[string]any{"signal_id": r.SignalID,
		"effect": r.Effect, "duplicate": r.Duplicate, "waitpoint_id": wp}}, nil
}

// SetLaneState checks the lane and refuses, as on Valkey.
func (d *Driver) SetLaneState(ctx context.Context, lane, state string) error {
	lanes, err := d.laneNames(ctx)
	if err != nil {
		return err
	}
	if err := inspCheckLane(lanes, lane); err != nil {
		return err
	}
	return fmt.Errorf("%w: lane %s cannot be %s: FlowFabric keeps no lane state, so a pause would not stop its workers", backend.ErrUnsupported, lane, state)
}
