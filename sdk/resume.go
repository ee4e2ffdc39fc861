package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
)

// ResumeSignal is a signal that satisfied a suspension's resume
// condition, as a resumed attempt reads it back.
type ResumeSignal struct {
	// ID is the signal id; WaitpointID the waitpoint it was delivered to.
	ID, WaitpointID string
	// Name, Category, SourceType, SourceIdentity and CorrelationID are
	// as delivered.
	Name, Category, SourceType, SourceIdentity, CorrelationID string
	// AcceptedAt is when the server accepted the signal.
	AcceptedAt time.Time
	// Payload is the signal's body (nil when it had none).
	Payload []byte
}

// ResumeSignals returns the signals that resumed this attempt from its
// suspension, oldest first (by acceptance time, in milliseconds): those that satisfied the resume condition's
// matchers (every counted waitpoint's satisfiers under
// SuspendSpec.AllWaitpoints or WaitpointQuorum). Signals that were delivered but matched
// nothing are not included. It returns nothing for an attempt that was
// not resumed by signals (a first run, a retry, a timeout resume).
func (l *Lease) ResumeSignals(ctx context.Context) ([]ResumeSignal, error) {
	return l.w.resumeSignals(ctx, &backend.ResumeSignalsParams{ExecutionID: l.ID, AttemptIndex: l.AttemptIndex})
}

// ResumeSignals returns the signals that resumed the job (see
// Lease.ResumeSignals).
func (j *Job) ResumeSignals(ctx context.Context) ([]ResumeSignal, error) {
	return j.lease.ResumeSignals(ctx)
}

// resumeSignals reads signals through the driver
// (backend.AttemptReadDriver.ResumeSignals): nil when none.
func (w *Worker) resumeSignals(ctx context.Context, p *backend.ResumeSignalsParams) ([]ResumeSignal, error) {
	sigs, err := w.drv.ResumeSignals(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	var out []ResumeSignal
	for _, s := range sigs {
		out = append(out, ResumeSignal{ID: s.ID, WaitpointID: s.WaitpointID, Name: s.Name, Category: s.Category,
			SourceType: s.SourceType, SourceIdentity: s.SourceIdentity, CorrelationID: s.CorrelationID,
			AcceptedAt: time.UnixMilli(s.AcceptedAt), Payload: s.Payload})
	}
	return out, nil
}

// SuspendOutcome is what TrySuspend did.
type SuspendOutcome struct {
	// Suspended: the lease is released and the job resumes in a later
	// claim (read its signals there with ResumeSignals).
	Suspended bool
	// Suspension is the suspension's waitpoints and tokens.
	Suspension *Suspension
	// Signals, when not Suspended, are the signals buffered on the
	// pending waitpoint that already satisfy the condition: the lease is
	// kept and the handler continues with them at once.
	Signals []ResumeSignal
}

// TrySuspend suspends like Suspend, but makes the already-satisfied case
// explicit: when signals buffered on a pending waitpoint
// (SuspendSpec.Pending) already satisfy the condition, nothing is
// suspended, the lease is kept, and the outcome carries those signals so
// the handler goes on without a trip through the queue. The Suspend
// wrapper reports that case only as Suspension.AlreadySatisfied.
//
// If the signals cannot be read after an already-satisfied suspend, the
// outcome is returned with the error; the lease is still held.
func (l *Lease) TrySuspend(ctx context.Context, spec SuspendSpec) (*SuspendOutcome, error) {
	s, err := l.Suspend(ctx, spec)
	if err != nil {
		return nil, err
	}
	out := &SuspendOutcome{Suspended: !s.AlreadySatisfied, Suspension: s}
	if out.Suspended {
		return out, nil
	}
	out.Signals, err = l.w.resumeSignals(ctx, &backend.ResumeSignalsParams{ExecutionID: l.ID,
		AttemptIndex: l.AttemptIndex, WaitpointID: s.WaitpointID})
	return out, err
}

// TrySuspend suspends unless the condition is already satisfied (see
// Lease.TrySuspend).
func (j *Job) TrySuspend(ctx context.Context, spec SuspendSpec) (*SuspendOutcome, error) {
	return j.lease.TrySuspend(ctx, spec)
}
