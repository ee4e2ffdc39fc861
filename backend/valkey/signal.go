package valkey

import (
	"context"

	"github.com/fabric-host/fabric/model/fcall"
)

// Defaults of the signal family, sent explicitly for zero values.
const (
	DefaultSignalDedupTTLMs       = fcall.DefaultSignalDedupTTLMs
	DefaultSignalMaxLen           = fcall.DefaultSignalMaxLen
	DefaultMaxSignalsPerExecution = fcall.DefaultMaxSignalsPerExecution
	DefaultSignalPayloadEncoding  = fcall.DefaultSignalPayloadEncoding
	DefaultSignalTargetScope      = fcall.DefaultSignalTargetScope
)

// SignalParams are the inputs of ff_deliver_signal and
// ff_buffer_signal_for_pending_waitpoint.
type SignalParams = fcall.SignalParams

// SignalResult is the reply of the signal functions.
type SignalResult = fcall.SignalResult

func parseSignalReply(rep *Reply) *SignalResult { return fcall.DecodeSignal(rep) }

// DeliverSignal delivers an authenticated signal to an active waitpoint
// (ff_deliver_signal); it may resume the execution.
func (c *Client) DeliverSignal(ctx context.Context, p *SignalParams) (*SignalResult, error) {
	q := *p
	if q.Lane == "" {
		f, err := c.suspCoreFields(ctx, p.ExecutionID, "lane_id")
		if err != nil {
			return nil, suspWrap("deliver signal", err)
		}
		q.Lane = f[0]
	}
	call := q.DeliverCall()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("deliver signal "+p.SignalID, err)
	}
	return parseSignalReply(rep), nil
}

// BufferSignalForPendingWaitpoint records an authenticated signal on a
// still-pending waitpoint without evaluating it
// (ff_buffer_signal_for_pending_waitpoint); suspend replays it.
func (c *Client) BufferSignalForPendingWaitpoint(ctx context.Context, p *SignalParams) (*SignalResult, error) {
	call := p.BufferCall()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("buffer signal "+p.SignalID, err)
	}
	return parseSignalReply(rep), nil
}

// ClaimResumedParams are the inputs of ff_claim_resumed_execution.
type ClaimResumedParams = fcall.ClaimResumedParams

// ClaimResumedResult is the reply of ff_claim_resumed_execution.
type ClaimResumedResult = fcall.ClaimResumedResult

// ClaimResumedExecution consumes the claim grant and resumes the same
// attempt under a new lease (ff_claim_resumed_execution).
func (c *Client) ClaimResumedExecution(ctx context.Context, p *ClaimResumedParams) (*ClaimResumedResult, error) {
	q := *p
	if !q.AttemptIndexKnown {
		f, err := c.suspCoreFields(ctx, p.ExecutionID, "current_attempt_index")
		if err != nil {
			return nil, suspWrap("claim resumed execution", err)
		}
		q.AttemptIndex = suspAttemptIndex(f[0])
	}
	call := q.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, suspWrap("claim resumed execution "+string(p.ExecutionID), err)
	}
	return fcall.DecodeClaimResumed(rep), nil
}
