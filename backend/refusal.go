package backend

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// CodedError is implemented by a driver's logical errors: a refusal by
// the stored state under FlowFabric's error code (stale_lease,
// execution_not_active, ...), as opposed to a transport failure. Sending
// the same call again cannot change its answer.
type CodedError interface {
	error
	// FlowFabricCode is the error code ("stale_lease", ...).
	FlowFabricCode() string
}

// CodeOf returns the FlowFabric error code err carries, "" when it
// carries none (a transport failure, a context's end, a malformed
// reply).
func CodeOf(err error) string {
	var c CodedError
	if errors.As(err, &c) {
		return c.FlowFabricCode()
	}
	return ""
}

// EndedError is implemented by a driver's execution_not_active refusal
// when it can say how the execution ended: EndedBy reports whether the
// fenced attempt itself ended it with outcome (the repeat of a lease-ending
// call whose first reply was lost, which the SDK then treats as done).
type EndedError interface {
	error
	// EndedBy reports whether the attempt f fences ended the execution
	// with outcome ("success", "failed", "cancelled", ...).
	EndedBy(f Fence, outcome string) bool
}

// EndedBy reports whether err says the attempt f fences already ended the
// execution with outcome (see EndedError); false when the driver cannot
// tell.
func EndedBy(err error, f Fence, outcome string) bool {
	var e EndedError
	return outcome != "" && errors.As(err, &e) && e.EndedBy(f, outcome)
}

// NetworkTransient reports the transport failures every driver may answer
// that are worth sending the same call again for: a reset, refused or
// closed connection, an unexpected end of stream, a network timeout. A
// context's end is not one. Drivers' IsTransient build on it.
func NetworkTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
