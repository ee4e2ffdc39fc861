package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// The Postgres paths of resume signals and streams: the feature files
// (resume.go, stream.go) branch here when the worker or client runs on
// Postgres.

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
