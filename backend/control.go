package backend

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/fabric-host/fabric/model"
)

// Sentinel errors of the control operations (ControlDriver).
var (
	// ErrFlowNotFound: the flow does not exist.
	ErrFlowNotFound = errors.New("backend: flow not found")
	// ErrFlowTerminal: the flow already ended (cancel of a cancelled
	// flow).
	ErrFlowTerminal = errors.New("backend: flow already terminal")
	// ErrInvalidToken: a signal's waitpoint token does not authenticate
	// it (forged, for another waitpoint or execution).
	ErrInvalidToken = errors.New("backend: invalid waitpoint token")
	// ErrWaitpointNotFound: the waitpoint does not exist (never created,
	// or closed because its suspension ended).
	ErrWaitpointNotFound = errors.New("backend: waitpoint not found")
	// ErrNotSuspended: the execution is not suspended (a signal to an
	// execution that already resumed or ended).
	ErrNotSuspended = errors.New("backend: execution not suspended")
)

// ControlDriver is the part of Driver a lease holder and an operator use
// beyond creating, claiming and ending executions: cancelling as the
// holder, cancelling a flow, suspending on a waitpoint and delivering
// signals to it, and an attempt's output stream. Both drivers implement
// it; backendtest runs each operation on both.
type ControlDriver interface {
	// CancelLeasedExecution cancels the fenced execution as its lease
	// holder (cancelled_by "worker"). A fence that no longer holds the
	// lease is ErrLeaseGone.
	CancelLeasedExecution(ctx context.Context, p *CancelLeasedExecutionParams) error
	// CancelFlow cancels a flow and every member that has not ended
	// (each member ends cancelled, with its completion delivered). A
	// missing flow is ErrFlowNotFound, a cancelled one ErrFlowTerminal.
	CancelFlow(ctx context.Context, p *CancelFlowParams) (*CancelFlowResult, error)
	// SuspendExecution releases the fenced lease and parks the execution
	// on a new waitpoint until a signal satisfies the resume condition;
	// the same attempt continues (AttemptType "resumed") when a worker
	// claims it after that. A fence that no longer holds the lease is
	// ErrLeaseGone.
	SuspendExecution(ctx context.Context, p *SuspendExecutionParams) (*SuspendExecutionResult, error)
	// DeliverSignal delivers a signal, authenticated by the waitpoint's
	// token, to a suspended execution's waitpoint. A signal that
	// satisfies the condition makes the execution eligible again. A bad
	// token is ErrInvalidToken, an unknown waitpoint
	// ErrWaitpointNotFound; an execution that is not suspended
	// ErrNotSuspended (or ErrWaitpointNotFound once its waitpoints are
	// closed).
	DeliverSignal(ctx context.Context, p *DeliverSignalParams) (*DeliverSignalResult, error)
	// AppendFrame appends a frame to the fenced attempt's output stream
	// and returns its entry id ("<ms>-<seq>", increasing). A fence that
	// no longer holds the lease is ErrLeaseGone.
	AppendFrame(ctx context.Context, p *AppendFrameParams) (*AppendFrameResult, error)
	// ReadStream reads an attempt's output stream in entry-id order.
	ReadStream(ctx context.Context, p *ReadStreamParams) (*StreamRead, error)
	// WaitpointDriver: pending waitpoints (waitpoint.go).
	WaitpointDriver
	// ChildrenDriver: waiting for child executions (children.go).
	ChildrenDriver
}

// CancelLeasedExecutionParams are the inputs of
// ControlDriver.CancelLeasedExecution.
type CancelLeasedExecutionParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	Holder      Holder
	// Reason is stored as the cancellation reason.
	Reason string
}

// CancelFlowParams are the inputs of ControlDriver.CancelFlow.
type CancelFlowParams struct {
	FlowID model.UUID
	// Reason is stored on the flow and on each cancelled member.
	Reason string
}

// CancelFlowResult is the outcome of ControlDriver.CancelFlow.
type CancelFlowResult struct {
	// Members are the members the cancel ended (those that had ended
	// before are not included).
	Members []model.ExecutionID
}

// Suspension timeout behaviours (SuspendExecutionParams.TimeoutBehavior).
const (
	TimeoutFail       = "fail"
	TimeoutCancel     = "cancel"
	TimeoutExpire     = "expire"
	TimeoutAutoResume = "auto_resume_with_timeout_signal"
)

// SuspendExecutionParams are the inputs of ControlDriver.SuspendExecution.
type SuspendExecutionParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	Holder      Holder
	// SuspensionID and WaitpointID are minted by the caller (UUID text);
	// WaitpointKey is the waitpoint's external key (required).
	SuspensionID string
	WaitpointID  string
	WaitpointKey string
	// ReasonCode is the suspension's reason ("waiting_for_signal" when
	// empty).
	ReasonCode string
	// SignalNames resume the execution: any one of them, or all with
	// MatchAll; none means any signal.
	SignalNames []string
	MatchAll    bool
	// TimeoutAt ends the suspension by TimeoutBehavior (TimeoutFail when
	// empty); 0 means never.
	TimeoutAt       int64
	TimeoutBehavior string
	// PendingWaitpointID suspends on a pending waitpoint of this attempt
	// (WaitpointDriver.CreatePendingWaitpoint) instead of a new one
	// (WaitpointID and WaitpointKey are then ignored): the signals it
	// buffered count now, and if they satisfy the condition the result
	// is AlreadySatisfied. Not with Extra.
	PendingWaitpointID string
	// Extra adds waitpoints, each with its own token and the same
	// condition: without AllWaitpoints or WaitpointQuorum a signal
	// satisfying the condition on any one of them resumes. Keys are
	// distinct; at most MaxExtraWaitpoints.
	Extra []WaitpointBinding
	// AllWaitpoints resumes only once every waitpoint (the primary one
	// and each of Extra) received a signal matching SignalNames (at most
	// one name, none: any); WaitpointQuorum once that many distinct ones
	// did. Both need Extra, exclude MatchAll and each other
	// (CompositeCondition).
	AllWaitpoints   bool
	WaitpointQuorum int
}

// SignalSetCondition is the single-waitpoint resume condition document
// FlowFabric's backend sends ff_suspend_execution (and fabric stores in
// ff_suspension_current.condition on Postgres): a signal_set of names, any
// one of them or all with matchAll (none: any signal), with the timeout
// behaviour (TimeoutFail when empty).
func SignalSetCondition(names []string, matchAll bool, behavior string) string {
	if names == nil {
		names = []string{}
	}
	mode := "any"
	if matchAll && len(names) > 0 {
		mode = "all"
	}
	if behavior == "" {
		behavior = TimeoutFail
	}
	b, _ := json.Marshal(map[string]any{"condition_type": "signal_set", "required_signal_names": names,
		"signal_match_mode": mode, "minimum_signal_count": 1, "timeout_behavior": behavior,
		"allow_operator_override": true})
	return string(b)
}

// SuspendExecutionResult is the outcome of ControlDriver.SuspendExecution.
type SuspendExecutionResult struct {
	SuspensionID string
	WaitpointID  string
	WaitpointKey string
	// Token authenticates signals to the waitpoint.
	Token string
	// Extra are the extra waitpoints, in SuspendExecutionParams.Extra
	// order, with their tokens.
	Extra []Waitpoint
	// AlreadySatisfied: the pending waitpoint's buffered signals already
	// satisfy the condition; nothing was suspended, the lease still
	// holds and the waitpoint is closed.
	AlreadySatisfied bool
}

// DeliverSignalParams are the inputs of ControlDriver.DeliverSignal.
type DeliverSignalParams struct {
	ExecutionID model.ExecutionID
	WaitpointID string
	Token       string
	// SignalID is minted by the caller (UUID text).
	SignalID string
	Name     string
	Payload  []byte
	// Source identifies the sender.
	Source string
	// IdempotencyKey makes a repeat delivery to the same waitpoint a
	// duplicate: nothing is recorded and the first signal's id returned.
	IdempotencyKey string
}

// Signal effects (DeliverSignalResult.Effect).
const (
	EffectResumed  = "resume_condition_satisfied"
	EffectAppended = "appended_to_waitpoint"
)

// DeliverSignalResult is the outcome of ControlDriver.DeliverSignal.
type DeliverSignalResult struct {
	SignalID string
	// Effect is EffectResumed when the signal satisfied the condition,
	// otherwise what the backend did with it (EffectAppended, or on
	// Valkey a signal_ignored_* effect for a name outside the
	// condition); empty on a duplicate.
	Effect string
	// Duplicate reports a repeat of an IdempotencyKey.
	Duplicate bool
}

// Frame modes (AppendFrameParams.Mode).
const (
	FrameDurable    = "durable"
	FrameBestEffort = "best_effort"
	FrameSummary    = "summary"
)

// AppendFrameParams are the inputs of ControlDriver.AppendFrame.
type AppendFrameParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	// FrameType is required (e.g. "log", "progress").
	FrameType     string
	Payload       []byte
	CorrelationID string
	// Mode is FrameDurable (default), FrameBestEffort or FrameSummary.
	Mode string
}

// AppendFrameResult is the outcome of ControlDriver.AppendFrame.
type AppendFrameResult struct {
	// EntryID is the frame's stream entry id, "<ms>-<seq>".
	EntryID string
}

// ReadStreamParams are the inputs of ControlDriver.ReadStream.
type ReadStreamParams struct {
	ExecutionID  model.ExecutionID
	AttemptIndex int
	// After reads frames after this entry id ("" from the start).
	After string
	// Count is how many frames at most (1..10000).
	Count int
}

// StreamFrame is one frame of an attempt stream: its entry id and its
// fields (frame_type, payload, encoding, source, correlation_id when
// set).
type StreamFrame struct {
	ID     string
	Fields map[string]string
}

// StreamRead is the outcome of ControlDriver.ReadStream.
type StreamRead struct {
	Frames []StreamFrame
	// Closed reports a stream whose attempt ended.
	Closed bool
}
