package valkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// ControlError wraps err, from a suspension, signal or stream call, with
// the backend sentinel its library code means (backend.ErrInvalidToken,
// backend.ErrWaitpointNotFound, backend.ErrNotSuspended, ...), keeping
// err in the chain, so callers match both backends alike.
func ControlError(err error) error { return mapControlErr(err, false) }

// mapControlErr is mapErr with the control operations' codes.
func mapControlErr(err error, fenced bool) error {
	if err == nil {
		return nil
	}
	var s error
	switch CodeOf(err) {
	case CodeFlowNotFound:
		s = backend.ErrFlowNotFound
	case CodeFlowAlreadyTerminal:
		s = backend.ErrFlowTerminal
	case CodeInvalidToken, CodeMissingToken, CodeTokenExpired, CodeInvalidWaitpointForExecution:
		s = backend.ErrInvalidToken
	case CodeWaitpointNotFound, CodeWaitpointNotPending, CodePendingWaitpointExpired:
		s = backend.ErrWaitpointNotFound
	case CodeWaitpointAlreadyExists, CodeAdditionalWaitpointMalformed, CodeUsePendingWithExtrasUnsupported:
		s = backend.ErrInvalidInput
	case CodeStaleOwnerCannotAppend, CodeStreamClosed:
		s = backend.ErrLeaseGone
	case CodeExecutionNotSuspended, CodeTargetNotSignalable, CodeWaitpointClosed, CodeWaitpointNotOpen:
		s = backend.ErrNotSuspended
	default:
		return mapErr(err, fenced)
	}
	return fmt.Errorf("%w: %w", s, err)
}

// CancelLeasedExecution implements backend.ControlDriver
// (ff_cancel_execution, source worker, fenced by lease id and epoch).
func (d *Driver) CancelLeasedExecution(ctx context.Context, p *backend.CancelLeasedExecutionParams) error {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return fmt.Errorf("%w: cancel execution: %v", backend.ErrInvalidInput, err)
	}
	_, err := d.c.CancelExecution(ctx, &CancelExecutionParams{ExecutionID: p.ExecutionID, Reason: p.Reason,
		Source: "worker", LeaseID: p.Fence.LeaseID, LeaseEpoch: p.Fence.LeaseEpoch})
	return mapControlErr(err, true)
}

// CancelFlow implements backend.ControlDriver as FlowFabric's server
// does synchronously: ff_cancel_flow with cancel_all, then
// ff_cancel_execution (operator_override) and ff_ack_cancel_member per
// member. Members that had already ended are acked, not reported.
func (d *Driver) CancelFlow(ctx context.Context, p *backend.CancelFlowParams) (*backend.CancelFlowResult, error) {
	if p.FlowID.IsZero() {
		return nil, fmt.Errorf("%w: cancel flow: a flow id is required", backend.ErrInvalidInput)
	}
	if err := d.checkFlowRouting(); err != nil {
		return nil, err
	}
	res, err := d.c.CancelFlow(ctx, p.FlowID, p.Reason, "cancel_all", DefaultCancelFlowGraceMs, nowMs())
	if err != nil {
		return nil, mapControlErr(err, false)
	}
	out := &backend.CancelFlowResult{}
	var errs []error
	for _, m := range res.Members {
		_, err := d.c.CancelExecution(ctx, &CancelExecutionParams{ExecutionID: m, Reason: p.Reason, Source: SourceOperatorOverride})
		switch {
		case err == nil:
			out.Members = append(out.Members, m)
		case errors.Is(err, CodeExecutionNotActive), errors.Is(err, CodeExecutionNotFound):
		default:
			errs = append(errs, err)
			continue
		}
		if err := d.c.AckCancelMember(ctx, p.FlowID, m); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("cancel flow %s: %w", p.FlowID, errors.Join(errs...))
	}
	return out, nil
}

// SuspendExecution implements backend.ControlDriver
// (ff_suspend_execution on a fresh waitpoint and its extra ones, or on a
// pending waitpoint).
func (d *Driver) SuspendExecution(ctx context.Context, p *backend.SuspendExecutionParams) (*backend.SuspendExecutionResult, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return nil, fmt.Errorf("%w: suspend: %v", backend.ErrInvalidInput, err)
	}
	if err := p.ValidateWaitpoints(); err != nil {
		return nil, err
	}
	if p.SuspensionID == "" || p.WaitpointID == "" && p.PendingWaitpointID == "" {
		return nil, fmt.Errorf("%w: suspend %s: suspension id, waitpoint id and key are required", backend.ErrInvalidInput, p.ExecutionID)
	}
	reason := p.ReasonCode
	if reason == "" {
		reason = "waiting_for_signal"
	}
	sp := &SuspendParams{ExecutionID: p.ExecutionID, AttemptIndex: p.Fence.AttemptIndex,
		Fence: p.Fence, SuspensionID: p.SuspensionID, WaitpointID: p.WaitpointID, WaitpointKey: p.WaitpointKey,
		ReasonCode: reason, RequestedBy: "worker", TimeoutAt: p.TimeoutAt,
		ResumeConditionJSON: p.ResumeCondition(p.WaitpointKey),
		ResumePolicyJSON:    "{}", TimeoutBehavior: p.TimeoutBehavior,
		Lane: p.Holder.LaneID, WorkerInstanceID: p.Holder.WorkerInstanceID}
	if p.PendingWaitpointID != "" {
		sp.WaitpointID, sp.WaitpointKey, sp.UsePendingWaitpoint = p.PendingWaitpointID, "", true
	}
	for _, x := range p.Extra {
		sp.Extra = append(sp.Extra, WaitpointBinding{WaitpointID: x.WaitpointID, WaitpointKey: x.WaitpointKey})
	}
	r, err := d.c.SuspendExecution(ctx, sp)
	if err != nil {
		return nil, mapControlErr(err, true)
	}
	out := &backend.SuspendExecutionResult{SuspensionID: r.SuspensionID, WaitpointID: r.Waitpoint.WaitpointID,
		WaitpointKey: r.Waitpoint.WaitpointKey, Token: r.Waitpoint.Token, AlreadySatisfied: r.AlreadySatisfied}
	for _, x := range r.Extra {
		out.Extra = append(out.Extra, backend.Waitpoint{ID: x.WaitpointID, Key: x.WaitpointKey, Token: x.Token})
	}
	return out, nil
}

// CreatePendingWaitpoint implements backend.WaitpointDriver
// (ff_create_pending_waitpoint).
func (d *Driver) CreatePendingWaitpoint(ctx context.Context, p *backend.CreatePendingWaitpointParams) (*backend.Waitpoint, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return nil, fmt.Errorf("%w: create pending waitpoint: %v", backend.ErrInvalidInput, err)
	}
	if _, err := model.ParseUUID(p.WaitpointID); err != nil || p.WaitpointKey == "" || p.ExpiresAt <= 0 {
		return nil, fmt.Errorf("%w: create pending waitpoint of %s: a UUID id, a key and an expiry are required",
			backend.ErrInvalidInput, p.ExecutionID)
	}
	g, err := d.c.CreatePendingWaitpoint(ctx, &CreatePendingWaitpointParams{ExecutionID: p.ExecutionID,
		AttemptIndex: p.Fence.AttemptIndex, WaitpointID: p.WaitpointID, WaitpointKey: p.WaitpointKey, ExpiresAt: p.ExpiresAt})
	if err != nil {
		return nil, mapControlErr(err, true)
	}
	return &backend.Waitpoint{ID: g.WaitpointID, Key: g.WaitpointKey, Token: g.Token}, nil
}

// DeliverSignal implements backend.ControlDriver (ff_deliver_signal,
// category external, source type sdk); a signal to a pending waitpoint
// is buffered (ff_buffer_signal_for_pending_waitpoint).
func (d *Driver) DeliverSignal(ctx context.Context, p *backend.DeliverSignalParams) (*backend.DeliverSignalResult, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return nil, fmt.Errorf("%w: deliver signal: %v", backend.ErrInvalidInput, err)
	}
	if p.WaitpointID == "" || p.Token == "" || p.Name == "" || p.SignalID == "" {
		return nil, fmt.Errorf("%w: deliver signal to %s: waitpoint id, token, signal id and name are required",
			backend.ErrInvalidInput, p.ExecutionID)
	}
	payload := string(p.Payload)
	if payload == "" {
		payload = "{}"
	}
	sp := &SignalParams{SignalID: p.SignalID, ExecutionID: p.ExecutionID,
		WaitpointID: p.WaitpointID, SignalName: p.Name, SignalCategory: "external", SourceType: "sdk",
		SourceIdentity: p.Source, Payload: payload, WaitpointToken: p.Token, IdempotencyKey: p.IdempotencyKey}
	r, err := d.c.DeliverSignal(ctx, sp)
	if errors.Is(err, CodeWaitpointPendingUseBuffer) {
		// A pending waitpoint (the attempt has not suspended on it yet):
		// buffer the signal; the suspend that activates it counts it.
		r, err = d.c.BufferSignalForPendingWaitpoint(ctx, sp)
	}
	if err != nil {
		return nil, mapControlErr(err, false)
	}
	return &backend.DeliverSignalResult{SignalID: r.SignalID, Effect: r.Effect, Duplicate: r.Duplicate}, nil
}

// AppendFrame implements backend.ControlDriver (ff_append_frame, exact
// retention of DefaultRetentionMaxLen frames).
func (d *Driver) AppendFrame(ctx context.Context, p *backend.AppendFrameParams) (*backend.AppendFrameResult, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return nil, fmt.Errorf("%w: append frame: %v", backend.ErrInvalidInput, err)
	}
	ap := &AppendFrameParams{ExecutionID: p.ExecutionID, AttemptIndex: p.Fence.AttemptIndex, Fence: p.Fence,
		FrameType: p.FrameType, Payload: string(p.Payload), CorrelationID: p.CorrelationID,
		RetentionMaxLen: DefaultRetentionMaxLen}
	switch p.Mode {
	case "", backend.FrameDurable:
	case backend.FrameBestEffort:
		ap.Mode = StreamModeBestEffort
	case backend.FrameSummary:
		if !json.Valid(p.Payload) {
			return nil, fmt.Errorf("%w: append frame to %s: a summary frame's payload must be JSON", backend.ErrInvalidInput, p.ExecutionID)
		}
		ap.Mode, ap.PatchKind = StreamModeSummary, PatchKindJSONMerge
	default:
		return nil, fmt.Errorf("%w: append frame to %s: mode %q", backend.ErrInvalidInput, p.ExecutionID, p.Mode)
	}
	if p.FrameType == "" {
		return nil, fmt.Errorf("%w: append frame to %s: empty frame type", backend.ErrInvalidInput, p.ExecutionID)
	}
	r, err := d.c.AppendFrame(ctx, ap)
	if err != nil {
		return nil, mapControlErr(err, true)
	}
	return &backend.AppendFrameResult{EntryID: r.EntryID}, nil
}

// ReadStream implements backend.ControlDriver (ff_read_attempt_stream).
func (d *Driver) ReadStream(ctx context.Context, p *backend.ReadStreamParams) (*backend.StreamRead, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return nil, fmt.Errorf("%w: read stream: %v", backend.ErrInvalidInput, err)
	}
	if p.AttemptIndex < 0 || p.Count < 1 || p.Count > 10000 {
		return nil, fmt.Errorf("%w: read stream of %s: attempt must be >= 0 and count in 1..10000", backend.ErrInvalidInput, p.ExecutionID)
	}
	from := "-"
	if p.After != "" {
		ms, seq, _ := strings.Cut(p.After, "-")
		_, err1 := strconv.ParseUint(ms, 10, 64)
		_, err2 := strconv.ParseUint(seq, 10, 64)
		if err1 != nil || (seq != "" && err2 != nil) {
			return nil, fmt.Errorf("%w: read stream of %s: entry id %q", backend.ErrInvalidInput, p.ExecutionID, p.After)
		}
		from = "(" + p.After
	}
	s, err := d.c.ReadAttemptStream(ctx, p.ExecutionID, p.AttemptIndex, from, "+", p.Count, "")
	if err != nil {
		return nil, mapControlErr(err, false)
	}
	out := &backend.StreamRead{Closed: s.ClosedAt != ""}
	for _, f := range s.Frames {
		out.Frames = append(out.Frames, backend.StreamFrame{ID: f.ID, Fields: f.Fields})
	}
	return out, nil
}
