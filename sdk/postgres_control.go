package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// The Postgres paths of suspension, signals and streams: the feature
// files (susp_ops.go, resume.go, stream.go) branch here when the worker
// or client runs on Postgres.

// pgSuspend is Lease.Suspend on Postgres (backend.ControlDriver's
// SuspendExecution): one waitpoint with a signal_set condition. Pending
// and extra waitpoints (and so composite conditions) are Valkey-only.
func (l *Lease) pgSuspend(ctx context.Context, spec SuspendSpec) (*Suspension, error) {
	switch {
	case spec.Pending != nil:
		return nil, errNotOnPostgres("Lease.Suspend with a pending waitpoint")
	case len(spec.ExtraWaitpoints) > 0:
		return nil, errNotOnPostgres("Lease.Suspend with extra waitpoints")
	}
	if err := l.begin(); err != nil {
		return nil, err
	}
	p := &backend.SuspendExecutionParams{ExecutionID: l.ID, Fence: l.fence,
		Holder:       backend.Holder{LaneID: l.Lane, WorkerInstanceID: l.w.cfg.InstanceID},
		SuspensionID: newID(), WaitpointID: newID(), WaitpointKey: spec.WaitpointKey, ReasonCode: spec.Reason,
		SignalNames: spec.Signals, MatchAll: spec.MatchAll, TimeoutBehavior: spec.behavior()}
	if p.WaitpointKey == "" {
		p.WaitpointKey = "wpk:" + newID()
	}
	if spec.Timeout > 0 {
		p.TimeoutAt = l.w.cfg.Clock().Add(spec.Timeout).UnixMilli()
	}
	res, err := l.w.drv.SuspendExecution(ctx, p)
	if err != nil {
		// Not suspended: the lease stays open unless the error says it
		// is gone (as on Valkey).
		l.settle(err)
		return nil, fmt.Errorf("sdk: suspend %s: %w", l.ID, err)
	}
	l.end()
	l.w.stats.suspended.Add(1)
	wp := Waitpoint{ID: res.WaitpointID, Key: res.WaitpointKey, Token: res.Token}
	return &Suspension{ExecutionID: l.ID, SuspensionID: res.SuspensionID, WaitpointID: wp.ID, WaitpointKey: wp.Key,
		Token: wp.Token, Waitpoints: []Waitpoint{wp}}, nil
}

// pgDeliverSignal is Client.DeliverSignal on Postgres (backend
// ControlDriver's DeliverSignal).
func (c *Client) pgDeliverSignal(ctx context.Context, id model.ExecutionID, s Signal, src string) (*SignalResult, error) {
	r, err := c.drv.DeliverSignal(ctx, &backend.DeliverSignalParams{ExecutionID: id, WaitpointID: s.WaitpointID,
		Token: s.Token, SignalID: newID(), Name: s.Name, Payload: s.Payload, Source: src, IdempotencyKey: s.IdempotencyKey})
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return &SignalResult{SignalID: r.SignalID, Effect: r.Effect, Duplicate: r.Duplicate,
		Resumed: r.Effect == backend.EffectResumed}, nil
}

// pgResumeSignals is Lease.ResumeSignals on Postgres: the signals the
// attempt's last suspension recorded as satisfying it.
func (l *Lease) pgResumeSignals(ctx context.Context) ([]ResumeSignal, error) {
	sigs, err := l.w.pg.ResumeSignals(ctx, l.ID, l.AttemptIndex)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	var out []ResumeSignal // nil when none, as on Valkey
	for _, s := range sigs {
		out = append(out, ResumeSignal{ID: s.ID, WaitpointID: s.WaitpointID, Name: s.Name, Category: s.Category,
			SourceType: s.SourceType, SourceIdentity: s.SourceIdentity, CorrelationID: s.CorrelationID,
			AcceptedAt: time.UnixMilli(s.AcceptedAt), Payload: s.Payload})
	}
	return out, nil
}

// pgAppendFrame is Lease.AppendFrame on Postgres (backend
// ControlDriver's AppendFrame), after the SDK's own validation.
func (l *Lease) pgAppendFrame(ctx context.Context, f Frame) (string, error) {
	r, err := l.w.drv.AppendFrame(ctx, &backend.AppendFrameParams{ExecutionID: l.ID, Fence: l.fence, FrameType: f.Type,
		Payload: f.Payload, CorrelationID: f.CorrelationID, Mode: f.Mode})
	if err != nil {
		return "", fmt.Errorf("sdk: append frame to %s: %w", l.ID, err)
	}
	return r.EntryID, nil
}

// pgReadStream is ReadAttemptStream (block 0) and TailAttemptStream on
// Postgres.
func (c *Client) pgReadStream(ctx context.Context, id model.ExecutionID, attempt int, after string, count int, block time.Duration) ([]StreamFrame, bool, error) {
	p := &backend.ReadStreamParams{ExecutionID: id, AttemptIndex: attempt, After: after, Count: count}
	var r *backend.StreamRead
	var err error
	if block > 0 {
		r, err = c.pg.TailStream(ctx, p, block)
	} else {
		r, err = c.drv.ReadStream(ctx, p)
	}
	if err != nil {
		return nil, false, fmt.Errorf("sdk: %w", err)
	}
	var frames []StreamFrame
	for _, f := range r.Frames {
		frames = append(frames, StreamFrame{ID: f.ID, Fields: f.Fields})
	}
	return frames, r.Closed, nil
}
