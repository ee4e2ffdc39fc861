package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// ErrConflict is an action the execution's state refuses (the API
// answers 409 with the flowfabric error code).
var ErrConflict = errors.New("conflict")

// ErrUnsupported is an action the backend cannot take (the API answers
// 501).
var ErrUnsupported = errors.New("not supported")

// ActionResult is what an operator action did.
type ActionResult struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	// Detail is the action's reply (the phase cancelled from, the new
	// priority, the signal's effect, ...).
	Detail map[string]any `json:"detail"`
}

// exists checks id parses and has a core, so actions on a bad or unknown
// id answer 400/404 rather than a Lua error.
func (cs *Console) exists(ctx context.Context, id string) (model.ExecutionID, error) {
	eid, err := ParseID(id)
	if err != nil {
		return "", err
	}
	raw := cs.c.Raw()
	n, err := raw.Do(ctx, raw.B().Exists().Key(model.KeysFor(eid).Core()).Build()).AsInt64()
	if err != nil {
		return "", fmt.Errorf("console: read %s: %w", eid, err)
	}
	if n == 0 {
		return "", fmt.Errorf("%w: execution %s", ErrNotFound, eid)
	}
	return eid, nil
}

// conflict turns a flowfabric logical error into ErrConflict.
func conflict(action string, err error) error {
	if code := valkey.CodeOf(err); code != "" {
		return fmt.Errorf("%w: %s refused: %s (%v)", ErrConflict, action, code, err)
	}
	return fmt.Errorf("console: %s: %w", action, err)
}

// Cancel cancels an execution as an operator (source operator_override).
func (cs *Console) Cancel(ctx context.Context, id, reason string) (*ActionResult, error) {
	eid, err := cs.exists(ctx, id)
	if err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "operator_cancel"
	}
	from, err := cs.c.CancelExecution(ctx, &valkey.CancelExecutionParams{ExecutionID: eid, Reason: reason,
		Source: valkey.SourceOperatorOverride})
	if err != nil {
		return nil, conflict("cancel", err)
	}
	return &ActionResult{ID: string(eid), Action: "cancel", Detail: map[string]any{"from": from, "reason": reason}}, nil
}

// Replay re-runs a terminal execution (ff_replay_execution).
func (cs *Console) Replay(ctx context.Context, id string) (*ActionResult, error) {
	eid, err := cs.exists(ctx, id)
	if err != nil {
		return nil, err
	}
	now, err := cs.c.ServerTime(ctx)
	if err != nil {
		return nil, fmt.Errorf("console: replay: %w", err)
	}
	n, err := cs.c.ReplayExecution(ctx, eid, now)
	if err != nil {
		return nil, conflict("replay", err)
	}
	// The reply counts a replayed skipped flow member's edges still
	// unsatisfied (0 otherwise); what the replay made of the execution is
	// read back, in the words the Postgres console answers with.
	raw := cs.c.Raw()
	f, err := raw.Do(ctx, raw.B().Hmget().Key(model.KeysFor(eid).Core()).Field("replay_count", "public_state").Build()).ToArray()
	if err != nil || len(f) != 2 {
		return nil, fmt.Errorf("console: replay %s: read back: %w", eid, err)
	}
	countText, _ := f[0].ToString()
	count, _ := strconv.ParseInt(countText, 10, 64)
	state, _ := f[1].ToString()
	return &ActionResult{ID: string(eid), Action: "replay", Detail: map[string]any{"replay_count": count,
		"public_state": state, "unsatisfied_edges": n}}, nil
}

// Priority changes an eligible execution's priority (0..9000).
func (cs *Console) Priority(ctx context.Context, id string, priority int) (*ActionResult, error) {
	if priority < 0 || priority > model.PriorityMax {
		return nil, fmt.Errorf("%w: priority must be 0..%d, got %d", ErrBadRequest, model.PriorityMax, priority)
	}
	eid, err := cs.exists(ctx, id)
	if err != nil {
		return nil, err
	}
	r, err := cs.c.ChangePriority(ctx, eid, priority)
	if err != nil {
		return nil, conflict("priority", err)
	}
	return &ActionResult{ID: string(eid), Action: "priority", Detail: map[string]any{"old": r.Old, "new": r.New}}, nil
}

// SignalRequest is an operator's signal to a suspended execution.
type SignalRequest struct {
	// Name is matched against the resume condition. Required.
	Name string `json:"name"`
	// Payload is the signal's JSON payload ("": none, and the resumed
	// worker's ResumeSignal.Payload is nil).
	Payload string `json:"payload,omitempty"`
	// WaitpointID defaults to the execution's current waitpoint.
	WaitpointID string `json:"waitpoint_id,omitempty"`
	// IdempotencyKey deduplicates deliveries per waitpoint.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Signal delivers a signal to an execution's waitpoint. The admin server
// holds the keyspace, so it reads the waitpoint's token itself: the
// operator needs the admin token, not the waitpoint's.
func (cs *Console) Signal(ctx context.Context, id string, s SignalRequest) (*ActionResult, error) {
	if s.Name == "" {
		return nil, fmt.Errorf("%w: a signal needs a name", ErrBadRequest)
	}
	eid, err := cs.exists(ctx, id)
	if err != nil {
		return nil, err
	}
	raw := cs.c.Raw()
	wp := s.WaitpointID
	if wp == "" {
		wp, err = raw.Do(ctx, raw.B().Hget().Key(model.KeysFor(eid).Core()).Field("current_waitpoint_id").Build()).ToString()
		if err != nil || wp == "" {
			return nil, fmt.Errorf("%w: signal refused: execution %s has no current waitpoint (not suspended)", ErrConflict, eid)
		}
	}
	token, err := raw.Do(ctx, raw.B().Hget().Key(model.KeysOn(eid.Partition()).Waitpoint(wp)).Field("waitpoint_token").Build()).ToString()
	if err != nil || token == "" {
		return nil, fmt.Errorf("%w: waitpoint %s of %s", ErrNotFound, wp, eid)
	}
	r, err := cs.c.DeliverSignal(ctx, &valkey.SignalParams{SignalID: model.NewUUID().String(), ExecutionID: eid,
		WaitpointID: wp, SignalName: s.Name, SignalCategory: "external", SourceType: "operator",
		SourceIdentity: "fabric-admin", Payload: s.Payload, IdempotencyKey: s.IdempotencyKey, WaitpointToken: token})
	if err != nil {
		return nil, conflict("signal", err)
	}
	return &ActionResult{ID: string(eid), Action: "signal", Detail: map[string]any{"signal_id": r.SignalID,
		"effect": r.Effect, "duplicate": r.Duplicate, "waitpoint_id": wp}}, nil
}

// SetLaneState would pause or resume a lane. FlowFabric defines lane
// states (active, paused, draining, disabled) as a type only: its Lua
// keeps no lane state on Valkey and no claim path reads one, so a pause
// here would not stop any worker. It checks the lane and returns
// ErrUnsupported.
func (cs *Console) SetLaneState(ctx context.Context, lane, state string) error {
	lanes, err := cs.laneNames(ctx)
	if err != nil {
		return err
	}
	if err := cs.checkLane(lanes, lane); err != nil {
		return err
	}
	return fmt.Errorf("%w: lane %s cannot be %s: FlowFabric keeps no lane state on Valkey (no claim path reads one), so a pause would not stop its workers",
		ErrUnsupported, lane, state)
}
