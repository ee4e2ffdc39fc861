package sdk

import (
	"context"

	"github.com/fabric-host/fabric/model"
)

// Work claims execution id (ClaimExecution) and runs h on it in the
// calling goroutine, ending the attempt as Run would — nil completes it
// (with the result the handler set), DelayFor and DelayUntil delay it,
// Permanent fails it for good and any other error fails it under its
// retry policy — and returns the handler's error. It is what a test runs
// one job with (rivertest's Worker.Work), and what a program uses to run
// a given execution now rather than when a claim reaches it. A claim
// refused is returned as ClaimExecution returns it (ErrNotFound,
// ErrNotClaimable, ErrInvalidInput), and h does not run.
func (w *Worker) Work(ctx context.Context, id model.ExecutionID, h Handler) error {
	l, err := w.ClaimExecution(ctx, id)
	if err != nil {
		return err
	}
	return w.work(ctx, l, h)
}

// WorkNext claims the next execution of the worker's lanes (ClaimNext)
// and runs h on it as Work does, returning its id and the handler's
// error; "" and nil when none is eligible. A test drains a lane with it.
func (w *Worker) WorkNext(ctx context.Context, h Handler) (model.ExecutionID, error) {
	l, err := w.ClaimNext(ctx)
	if err != nil || l == nil {
		return "", err
	}
	return l.ID, w.work(ctx, l, h)
}

// work runs h on the claimed lease l and ends the attempt by its outcome.
func (w *Worker) work(ctx context.Context, l *Lease, h Handler) error {
	var herr error
	// A cancelled run context: the attempt ends without claiming another.
	done, cancel := context.WithCancel(ctx)
	cancel()
	w.handle(done, ctx, l, func(ctx context.Context, job *Job) error {
		herr = h(ctx, job)
		return herr
	}, func() {})
	return herr
}
