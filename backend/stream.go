package backend

import (
	"context"
	"errors"
	"time"

	"github.com/fabric-host/fabric/model"
)

// AttemptReadDriver reads what an attempt left behind beyond its frames:
// a blocking read of its stream, the summary its FrameSummary frames were
// merged into, and the signals that resumed it. Both drivers implement
// it; backendtest runs each operation on both.
type AttemptReadDriver interface {
	// TailStream is ControlDriver.ReadStream that waits up to Block for a
	// frame after After when there is none yet (and the stream is not
	// closed). No frame in time is an empty read, Closed still reported.
	TailStream(ctx context.Context, p *TailStreamParams) (*StreamRead, error)
	// ReadSummary reads an attempt's summary document: "" and version 0
	// before the first summary frame.
	ReadSummary(ctx context.Context, p *ReadSummaryParams) (*Summary, error)
	// ResumeSignals reads the signals that satisfied the execution's
	// last suspension, oldest first, when that suspension was of
	// AttemptIndex and ended resumed; none otherwise (a first run, a
	// retry, a timeout resume, another attempt's suspension).
	ResumeSignals(ctx context.Context, p *ResumeSignalsParams) ([]ResumeSignal, error)
}

// ErrUnsupported is errors.ErrUnsupported: a driver answers it (wrapped)
// for a feature its backend does not have, named in the operation's
// documentation.
var ErrUnsupported = errors.ErrUnsupported

// TailStreamParams are the inputs of AttemptReadDriver.TailStream.
type TailStreamParams struct {
	ReadStreamParams
	// Block is how long to wait for a frame (at least a millisecond).
	Block time.Duration
}

// ReadSummaryParams are the inputs of AttemptReadDriver.ReadSummary.
type ReadSummaryParams struct {
	ExecutionID  model.ExecutionID
	AttemptIndex int
}

// Summary is an attempt's summary document and its version (the number
// of patches applied).
type Summary struct {
	Document string
	Version  int64
}

// ResumeSignalsParams are the inputs of AttemptReadDriver.ResumeSignals.
type ResumeSignalsParams struct {
	ExecutionID  model.ExecutionID
	AttemptIndex int
	// WaitpointID, when set, reads instead the signals that satisfy that
	// waitpoint's condition now, whatever the suspension record says: a
	// pending waitpoint whose buffered signals already satisfied a
	// suspend (SuspendExecutionResult.AlreadySatisfied). The Postgres
	// driver does not keep per-waitpoint satisfiers and answers
	// ErrUnsupported (wrapped).
	WaitpointID string
}

// ResumeSignal is a signal that satisfied a suspension's resume
// condition, as the resumed attempt reads it back.
type ResumeSignal struct {
	// ID is the signal id; WaitpointID the waitpoint it was delivered to.
	ID, WaitpointID string
	// Name, Category, SourceType, SourceIdentity and CorrelationID are as
	// delivered.
	Name, Category, SourceType, SourceIdentity, CorrelationID string
	// AcceptedAt is when the backend accepted it (ms).
	AcceptedAt int64
	// Payload is the signal's body (nil when it had none).
	Payload []byte
}
