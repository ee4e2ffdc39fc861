package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// ErrLeaseLost is the cause of a lease context cancelled because a
// renewal found the lease gone (stale_lease, lease_expired,
// lease_revoked or the execution no longer active). The wrapped error
// carries the library's code.
var ErrLeaseLost = errors.New("sdk: lease lost")

// ErrLeaseFinished is the cause of a lease context ended by the lease's
// own Complete, Fail, Delay or Suspend, and the error those return when
// called a second time.
var ErrLeaseFinished = errors.New("sdk: lease already finished")

// Lease is a claimed execution: its inputs, its fence and the calls
// that end it. It renews itself in the background at 2/3 of the lease
// TTL until it is finished or lost. Exactly one of Complete, Fail, Delay
// or Suspend should end it.
type Lease struct {
	w *Worker

	// ID, Lane, Kind and Namespace identify the execution.
	ID        model.ExecutionID
	Lane      string
	Kind      string
	Namespace string
	// Payload is the execution's input.
	Payload []byte
	// AttemptIndex counts attempts from 0; AttemptType is initial, retry,
	// replay, reclaim or resumed.
	AttemptIndex int
	AttemptType  string

	flow      string
	fence     backend.Fence
	expiresAt atomic.Int64

	ctx       context.Context
	cancel    context.CancelCauseFunc
	renewDone chan struct{}

	mu       sync.Mutex
	finished bool
	run      bool // owned by Run (guarded by w.mu)
}

// newLease is the lease of a claim; it starts renewing.
func (w *Worker) newLease(cr *backend.ClaimResult) *Lease {
	l := &Lease{w: w, ID: cr.ExecutionID, Lane: cr.LaneID, Kind: cr.Kind, Namespace: cr.Namespace, Payload: cr.Payload,
		flow: cr.FlowID, AttemptIndex: cr.Fence.AttemptIndex, AttemptType: cr.AttemptType, fence: cr.Fence, renewDone: make(chan struct{})}
	l.expiresAt.Store(cr.ExpiresAt)
	switch cr.AttemptType {
	case "reclaim":
		w.stats.reclaimed.Add(1)
	case "resumed":
		w.stats.resumed.Add(1)
	default:
		w.stats.claimed.Add(1)
	}
	l.ctx, l.cancel = context.WithCancelCause(w.life)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leases[l] = struct{}{}
	if w.bgStopped {
		// The worker's life ended and its goroutines were waited for (a
		// claim of a handler goroutine that outlived a killed Run): no
		// renewal starts, and the lease's context is already done.
		close(l.renewDone)
		return l
	}
	w.bg.Add(1)
	go l.renewLoop()
	return l
}

// Context is cancelled when the lease is finished, lost (cause wraps
// ErrLeaseLost) or the worker dies. Handlers should stop work when it
// ends: the lease can no longer be used.
func (l *Lease) Context() context.Context { return l.ctx }

// Fence returns the lease's fence (lease id, epoch, attempt id and
// index).
func (l *Lease) Fence() backend.Fence { return l.fence }

// ExpiresAt returns the server expiry of the lease as last renewed.
func (l *Lease) ExpiresAt() time.Time { return time.UnixMilli(l.expiresAt.Load()) }

// leaseGone reports renewal errors that mean the lease cannot come back:
// the drivers' backend.ErrLeaseGone, or a FlowFabric code that says so.
func leaseGone(err error) bool {
	if errors.Is(err, backend.ErrLeaseGone) {
		return true
	}
	switch backend.CodeOf(err) {
	case "stale_lease", "lease_expired", "lease_revoked", "execution_not_active", "no_active_lease", "execution_not_found":
		return true
	}
	return false
}

// renewLoop renews at 2/3 of the TTL; a transient failure is retried
// every TTL/10 until the lease would have expired.
func (l *Lease) renewLoop() {
	defer l.w.bg.Done()
	defer close(l.renewDone)
	ttl := l.w.cfg.LeaseTTL
	t := time.NewTimer(ttl * 2 / 3)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		if l.ending() {
			// A lease-ending call is in flight: a renewal now would race
			// it; look again shortly (the call either ends the lease or
			// reopens it).
			t.Reset(ttl / 10)
			continue
		}
		err := l.Renew(l.ctx)
		switch {
		case err == nil:
			t.Reset(ttl * 2 / 3)
		case l.ctx.Err() != nil:
			return
		case leaseGone(err):
			l.w.log.Warn("lease lost", "execution_id", l.ID, "error", err)
			l.lose(fmt.Errorf("%w: %w", ErrLeaseLost, err))
			return
		default:
			l.w.log.Warn("lease renewal failed; retrying", "execution_id", l.ID, "error", err)
			t.Reset(ttl / 10)
		}
	}
}

// Renew extends the lease to now+TTL (backend.Driver.RenewLease:
// ff_renew_lease on Valkey). The background loop calls it; calling it
// directly is only needed by code that blocks the loop's schedule (it
// never does by itself).
func (l *Lease) Renew(ctx context.Context) error {
	exp, err := l.w.drv.RenewLease(ctx, &backend.RenewLeaseParams{ExecutionID: l.ID, Fence: l.fence,
		LeaseTTLMs: l.w.cfg.LeaseTTL.Milliseconds()})
	if err != nil {
		return fmt.Errorf("sdk: renew %s: %w", l.ID, err)
	}
	l.expiresAt.Store(exp)
	return nil
}

// lose ends the lease after a renewal found it gone.
func (l *Lease) lose(cause error) {
	l.mu.Lock()
	l.finished = true
	l.mu.Unlock()
	l.cancel(cause)
	l.forget()
}

func (l *Lease) forget() {
	l.w.mu.Lock()
	delete(l.w.leases, l)
	l.w.mu.Unlock()
}

// begin marks the lease finished for a terminal call; a second call
// gets ErrLeaseFinished (or the loss cause).
func (l *Lease) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finished {
		if c := context.Cause(l.ctx); c != nil && !errors.Is(c, ErrLeaseFinished) {
			return c
		}
		return ErrLeaseFinished
	}
	l.finished = true
	return nil
}

// ending reports whether a lease-ending call has begun (or ended it).
func (l *Lease) ending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.finished
}

// end stops renewal after the lease was handed to the server.
func (l *Lease) end() {
	l.cancel(ErrLeaseFinished)
	<-l.renewDone
	l.forget()
}

// finishCall runs a lease-ending call: it stops renewal first (so no
// renew races the release), retries transport failures up to 3 times,
// waits out a server's transient errors (backend.Driver.IsTransient)
// while the lease lasts, and treats an execution_not_active reply that shows this very lease's
// epoch and attempt with the expected outcome as success (the replay of
// a call whose reply was lost), as FlowFabric's SDK does.
//
// A call that failed while the server still holds the lease (a refusal
// such as a BUSY server, an invalid argument, or a transport error after
// the retries) leaves the lease open: it keeps renewing and the caller
// may end it another way (Run fails the attempt, or hands it back).
// Only a reply that says the lease is gone ends it.
func (l *Lease) finishCall(ctx context.Context, op string, outcome string, call func(context.Context) error) error {
	if err := l.begin(); err != nil {
		return err
	}
	return l.finish(ctx, op, outcome, call(ctx), call)
}

// finish is finishCall after begin and a first try that answered err (a
// try that may have been pipelined with other calls): call is sent again
// as finishCall says.
func (l *Lease) finish(ctx context.Context, op string, outcome string, err error, call func(context.Context) error) error {
	pause := 25 * time.Millisecond
	for try := 0; ; try++ {
		if err == nil {
			l.end()
			return nil
		}
		if backend.CodeOf(err) != "" || ctx.Err() != nil {
			break
		}
		// A transport error is sent again at once, up to 3 times; a
		// server's passing bad moment (BUSY under a long script, LOADING,
		// a failover, a reset connection) is waited out with a doubling
		// pause while the lease is still ours.
		if !l.w.drv.IsTransient(err) {
			if try >= 2 {
				break
			}
		} else {
			if time.Until(l.ExpiresAt()) < pause {
				break
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			pause = min(2*pause, time.Second)
		}
		err = call(ctx)
	}
	if backend.EndedBy(err, l.fence, outcome) {
		l.end()
		return nil
	}
	l.settle(err)
	return fmt.Errorf("sdk: %s %s: %w", op, l.ID, err)
}

// settle ends the lease after a failed lease-ending call when the reply
// says the server no longer holds it, and reopens it otherwise, so that
// the execution is not stranded: the lease keeps renewing and another
// ending call may follow.
func (l *Lease) settle(err error) {
	if leaseGone(err) {
		l.end()
		return
	}
	l.mu.Lock()
	l.finished = false
	l.mu.Unlock()
}

// Complete ends the attempt successfully (ff_complete_execution) and
// stores result when non-empty.
func (l *Lease) Complete(ctx context.Context, result []byte) error {
	err := l.finishCall(ctx, "complete", model.OutcomeSuccess, func(ctx context.Context) error {
		return l.complete(ctx, result)
	})
	if err == nil {
		l.cascade(ctx)
	}
	return err
}

// complete is the lease's completion through the driver.
func (l *Lease) complete(ctx context.Context, result []byte) error {
	return l.w.drv.CompleteExecution(ctx, l.completeParams(result))
}

func (l *Lease) completeParams(result []byte) *backend.CompleteExecutionParams {
	return &backend.CompleteExecutionParams{ExecutionID: l.ID, Fence: l.fence,
		Holder: backend.Holder{LaneID: l.Lane, WorkerInstanceID: l.w.cfg.InstanceID}, Result: result}
}

// completeAndClaim completes the lease (as Complete) and claims the next
// execution with it (backend.Claimer.CompleteAndClaim: on Valkey the
// completion rides with the next claim in one round trip). It returns
// the next lease, if one was claimed, and the completion's error.
func (w *Worker) completeAndClaim(ctx context.Context, l *Lease, result []byte) (*Lease, error) {
	if err := l.begin(); err != nil {
		return nil, err
	}
	crs, first, cerr := w.claimer.CompleteAndClaim(ctx, l.completeParams(result), 1)
	next := w.newLeases(crs)
	if cerr != nil && !errors.Is(cerr, ErrWorkerClosed) {
		w.log.Warn("claim failed", "error", cerr)
	}
	err := l.finish(ctx, "complete", model.OutcomeSuccess, first, func(ctx context.Context) error { return l.complete(ctx, result) })
	if err == nil {
		l.cascade(ctx)
	}
	if next = w.keepN(ctx, next, 1); len(next) > 0 {
		return next[0], err
	}
	return nil, err
}

// cascade resolves a terminal flow member's outgoing edges when the
// worker is configured to (WorkerConfig.ResolveDependencies; the claim
// session's ResolveDependencies, a no-op on Postgres). Best effort: the
// engine's dependency reconciler is the safety net.
func (l *Lease) cascade(ctx context.Context) {
	if !l.w.cfg.ResolveDependencies {
		return
	}
	if err := l.w.claimer.ResolveDependencies(ctx, l.ID, l.flow); err != nil {
		l.w.log.Warn("resolve dependencies failed", "execution_id", l.ID, "flow_id", l.flow, "error", err)
	}
}
