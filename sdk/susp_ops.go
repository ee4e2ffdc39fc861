package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

func newID() string { return model.NewUUID().String() }

// SuspendSpec describes what a suspended execution waits for.
type SuspendSpec struct {
	// Signals are the signal names that resume the execution; empty
	// means any signal.
	Signals []string
	// MatchAll requires every name in Signals (default: any one).
	MatchAll bool
	// Timeout ends the suspension after this long (0: never).
	Timeout time.Duration
	// TimeoutBehavior is fail (default), cancel, expire or
	// auto_resume_with_timeout_signal.
	TimeoutBehavior string
	// WaitpointKey is the waitpoint's external key (a random one when
	// empty).
	WaitpointKey string
	// Reason is the suspension's reason code (waiting_for_signal when
	// empty).
	Reason string
	// ExtraWaitpoints adds waitpoints to the suspension, one per key
	// ("" for a random key; keys are distinct, the primary one's
	// included), each with its own token and the same
	// condition: a signal satisfying any one of them resumes the
	// execution (e.g. one waitpoint per approver). Not with Pending.
	ExtraWaitpoints []string
	// AllWaitpoints resumes only when every waitpoint (the primary one
	// and each of ExtraWaitpoints) received a signal matching Signals
	// (a composite AllOf condition), e.g. every approver signed off.
	// Signals may then name at most one signal (none: any name), and
	// MatchAll does not apply. Requires ExtraWaitpoints.
	AllWaitpoints bool
	// WaitpointQuorum resumes once this many distinct waitpoints (of
	// the primary one and ExtraWaitpoints) received a signal matching
	// Signals (a composite Count condition), e.g. two of three
	// reviewers. 0: not used. Same rules as AllWaitpoints, which is the
	// quorum of all; the two are exclusive.
	WaitpointQuorum int
	// Pending suspends on a waitpoint created earlier in this attempt
	// with CreatePendingWaitpoint: signals delivered to it before the
	// suspend were buffered and count now (the result may be
	// AlreadySatisfied). WaitpointKey is ignored.
	Pending *Waitpoint
}

// Waitpoint is one waitpoint of a suspension: where signals are
// delivered (ID) and the HMAC token that authenticates them.
type Waitpoint struct {
	ID, Key, Token string
}

func (s *SuspendSpec) validate() error {
	if s.Timeout < 0 {
		return invalid("suspend.timeout", "must not be negative (got %s)", s.Timeout)
	}
	switch s.TimeoutBehavior {
	case "", "fail", "cancel", "expire", "auto_resume_with_timeout_signal":
	default:
		return invalid("suspend.timeout_behavior", "unknown behavior %q", s.TimeoutBehavior)
	}
	for _, n := range s.Signals {
		if n == "" {
			return invalid("suspend.signals", "signal names must not be empty")
		}
	}
	if s.Pending != nil && len(s.ExtraWaitpoints) > 0 {
		return invalid("suspend.extra_waitpoints", "extra waitpoints cannot be combined with a pending waitpoint")
	}
	if s.Pending != nil && s.Pending.ID == "" {
		return invalid("suspend.pending", "waitpoint id is empty")
	}
	if s.WaitpointQuorum != 0 {
		switch {
		case s.AllWaitpoints:
			return invalid("suspend.waitpoint_quorum", "cannot be combined with AllWaitpoints")
		case s.WaitpointQuorum < 1 || s.WaitpointQuorum > 1+len(s.ExtraWaitpoints):
			return invalid("suspend.waitpoint_quorum", "%d is out of range 1..%d (the waitpoints)", s.WaitpointQuorum, 1+len(s.ExtraWaitpoints))
		}
	}
	if s.AllWaitpoints || s.WaitpointQuorum != 0 {
		switch {
		case len(s.ExtraWaitpoints) == 0:
			return invalid("suspend.all_waitpoints", "needs extra waitpoints (one waitpoint alone is the default condition)")
		case len(s.Signals) > 1:
			return invalid("suspend.all_waitpoints", "at most one signal name (got %d)", len(s.Signals))
		case s.MatchAll:
			return invalid("suspend.all_waitpoints", "cannot be combined with MatchAll")
		}
	}
	seen := map[string]bool{s.WaitpointKey: s.WaitpointKey != ""}
	for _, k := range s.ExtraWaitpoints {
		if k != "" && seen[k] {
			return invalid("suspend.extra_waitpoints", "key %q is used twice", k)
		}
		seen[k] = true
	}
	if len(s.ExtraWaitpoints) > MaxExtraWaitpoints {
		return invalid("suspend.extra_waitpoints", "%d exceed %d", len(s.ExtraWaitpoints), MaxExtraWaitpoints)
	}
	return nil
}

// MaxExtraWaitpoints bounds SuspendSpec.ExtraWaitpoints.
const MaxExtraWaitpoints = backend.MaxExtraWaitpoints

func (s *SuspendSpec) behavior() string {
	if s.TimeoutBehavior == "" {
		return "fail"
	}
	return s.TimeoutBehavior
}

// Suspension is a suspended execution's waitpoint: deliver signals to it
// with Client.DeliverSignal, authenticated by Token.
type Suspension struct {
	// ExecutionID is the suspended execution; SuspensionID its
	// suspension record; WaitpointID, WaitpointKey and Token address and
	// authenticate its waitpoint.
	ExecutionID  model.ExecutionID
	SuspensionID string
	WaitpointID  string
	WaitpointKey string
	Token        string
	// AlreadySatisfied: signals buffered earlier already satisfy the
	// condition; the lease is kept and the execution is still active.
	AlreadySatisfied bool
	// Waitpoints are all the suspension's waitpoints, the primary one
	// (WaitpointID, WaitpointKey, Token) first, then the extra ones in
	// SuspendSpec.ExtraWaitpoints order.
	Waitpoints []Waitpoint
}

// Suspend releases the lease and parks the execution until its resume
// condition is satisfied (backend.ControlDriver's SuspendExecution:
// ff_suspend_execution on Valkey). When it is resumed a worker claims it
// again (AttemptType "resumed", same attempt). Unless the result says
// AlreadySatisfied, the lease is finished.
func (l *Lease) Suspend(ctx context.Context, spec SuspendSpec) (*Suspension, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if err := l.begin(); err != nil {
		return nil, err
	}
	p := &backend.SuspendExecutionParams{ExecutionID: l.ID, Fence: l.fence,
		Holder:       backend.Holder{LaneID: l.Lane, WorkerInstanceID: l.w.cfg.InstanceID},
		SuspensionID: newID(), WaitpointID: newID(), WaitpointKey: spec.WaitpointKey, ReasonCode: spec.Reason,
		SignalNames: spec.Signals, MatchAll: spec.MatchAll, TimeoutBehavior: spec.behavior(),
		AllWaitpoints: spec.AllWaitpoints, WaitpointQuorum: spec.WaitpointQuorum}
	if p.WaitpointKey == "" {
		p.WaitpointKey = "wpk:" + newID()
	}
	for _, key := range spec.ExtraWaitpoints {
		if key == "" {
			key = "wpk:" + newID()
		}
		p.Extra = append(p.Extra, backend.WaitpointBinding{WaitpointID: newID(), WaitpointKey: key})
	}
	if spec.Pending != nil {
		p.PendingWaitpointID, p.WaitpointID, p.WaitpointKey = spec.Pending.ID, "", ""
	}
	if spec.Timeout > 0 {
		p.TimeoutAt = l.w.cfg.Clock().Add(spec.Timeout).UnixMilli()
	}
	res, err := l.w.drv.SuspendExecution(ctx, p)
	switch {
	case err != nil:
		// Not suspended: the lease stays open unless the error says it
		// is gone, so the handler's error fails the attempt under its
		// retry policy instead of stranding the execution.
		l.settle(err)
		return nil, fmt.Errorf("sdk: suspend %s: %w", l.ID, err)
	case res.AlreadySatisfied:
		l.mu.Lock()
		l.finished = false
		l.mu.Unlock()
	default:
		l.end()
		l.w.stats.suspended.Add(1)
	}
	out := &Suspension{ExecutionID: l.ID, SuspensionID: res.SuspensionID, WaitpointID: res.WaitpointID,
		WaitpointKey: res.WaitpointKey, Token: res.Token, AlreadySatisfied: res.AlreadySatisfied}
	out.Waitpoints = append(out.Waitpoints, Waitpoint{ID: out.WaitpointID, Key: out.WaitpointKey, Token: out.Token})
	for _, x := range res.Extra {
		out.Waitpoints = append(out.Waitpoints, Waitpoint(x))
	}
	return out, nil
}

// Suspend suspends the job (see Lease.Suspend). After a successful
// suspend the handler's return value is ignored.
func (j *Job) Suspend(ctx context.Context, spec SuspendSpec) (*Suspension, error) {
	return j.lease.Suspend(ctx, spec)
}

// Frame is one output frame of an attempt stream.
type Frame struct {
	// Type is the frame type (e.g. "log", "progress", "token").
	Type string
	// Payload is the frame body.
	Payload []byte
	// CorrelationID optionally links frames.
	CorrelationID string
	// Mode is FrameDurable (the default), FrameBestEffort (trimmed by
	// age and rate, hidden from readers that exclude it) or FrameSummary
	// (Payload is a JSON merge patch applied to the attempt's summary
	// document; see Client.ReadSummary).
	Mode string
}

// Frame modes.
const (
	FrameDurable    = "durable"
	FrameBestEffort = "best_effort"
	FrameSummary    = "summary"
)

// AppendFrame appends an output frame to the attempt's durable stream
// (ff_append_frame) and returns its stream entry id.
func (l *Lease) AppendFrame(ctx context.Context, f Frame) (string, error) {
	if f.Type == "" {
		return "", invalid("frame.type", "must not be empty")
	}
	if len(f.Payload) > fcall.DefaultMaxFramePayloadBytes {
		return "", invalid("frame.payload", "%d bytes exceed %d", len(f.Payload), fcall.DefaultMaxFramePayloadBytes)
	}
	switch f.Mode {
	case "", FrameDurable, FrameBestEffort:
	case FrameSummary:
		if !json.Valid(f.Payload) {
			return "", invalid("frame.payload", "a summary frame's payload must be a JSON merge patch")
		}
	default:
		return "", invalid("frame.mode", "unknown mode %q (durable, best_effort or summary)", f.Mode)
	}
	r, err := l.w.drv.AppendFrame(ctx, &backend.AppendFrameParams{ExecutionID: l.ID, Fence: l.fence, FrameType: f.Type,
		Payload: f.Payload, CorrelationID: f.CorrelationID, Mode: f.Mode})
	if err != nil {
		return "", fmt.Errorf("sdk: append frame to %s: %w", l.ID, err)
	}
	return r.EntryID, nil
}

// AppendFrame appends an output frame (see Lease.AppendFrame).
func (j *Job) AppendFrame(ctx context.Context, f Frame) (string, error) {
	return j.lease.AppendFrame(ctx, f)
}

// Signal is a signal delivered to a suspended execution's waitpoint.
type Signal struct {
	// WaitpointID and Token come from the Suspension.
	WaitpointID string
	Token       string
	// Name is matched against the resume condition's names.
	Name    string
	Payload []byte
	// Source identifies the sender (source_type "sdk" when empty).
	Source string
	// IdempotencyKey deduplicates deliveries per waitpoint.
	IdempotencyKey string
}

// SignalResult is what a delivery did.
type SignalResult struct {
	// SignalID is the accepted signal (or the first one under a repeated
	// idempotency key).
	SignalID string
	// Effect is resume_condition_satisfied, appended_to_waitpoint, ...
	Effect string
	// Duplicate reports a repeat of an idempotency key.
	Duplicate bool
	// Resumed reports that the signal satisfied the condition.
	Resumed bool
}

// DeliverSignal delivers an authenticated signal (ff_deliver_signal); a
// signal that satisfies the resume condition makes the execution
// claimable again. A signal for a pending waitpoint (see
// Lease.CreatePendingWaitpoint) is buffered until the execution suspends
// on it (Effect buffered_for_pending_waitpoint).
func (c *Client) DeliverSignal(ctx context.Context, id model.ExecutionID, s Signal) (*SignalResult, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, invalid("id", "%v", err)
	}
	if s.WaitpointID == "" || s.Token == "" || s.Name == "" {
		return nil, invalid("signal", "waitpoint id, token and name are required")
	}
	src := s.Source
	if src == "" {
		src = c.who
	}
	r, err := c.drv.DeliverSignal(ctx, &backend.DeliverSignalParams{ExecutionID: id, WaitpointID: s.WaitpointID,
		Token: s.Token, SignalID: newID(), Name: s.Name, Payload: s.Payload, Source: src, IdempotencyKey: s.IdempotencyKey})
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return &SignalResult{SignalID: r.SignalID, Effect: r.Effect, Duplicate: r.Duplicate,
		Resumed: r.Effect == backend.EffectResumed}, nil
}

// StreamFrame is a frame read back from an attempt stream.
type StreamFrame struct {
	// ID is the stream entry id.
	ID string
	// Fields are the entry's fields (frame_type, payload, ...).
	Fields map[string]string
}

// ReadAttemptStream reads up to count frames (1..10000) of an attempt's
// stream, after entry id after ("" = from the start). closed reports a
// stream whose attempt ended.
func (c *Client) ReadAttemptStream(ctx context.Context, id model.ExecutionID, attempt int, after string, count int) (frames []StreamFrame, closed bool, err error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, false, invalid("id", "%v", err)
	}
	if attempt < 0 || count < 1 || count > 10000 {
		return nil, false, invalid("stream", "attempt must be >= 0 and count in 1..10000")
	}
	r, err := c.drv.ReadStream(ctx, &backend.ReadStreamParams{ExecutionID: id, AttemptIndex: attempt, After: after, Count: count})
	if err != nil {
		return nil, false, fmt.Errorf("sdk: %w", err)
	}
	return streamFrames(r), r.Closed, nil
}
