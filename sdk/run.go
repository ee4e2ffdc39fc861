package sdk

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/model"
)

// Handler processes one job. Returning nil completes the execution
// (with the result set by Job.SetResult); returning an error fails the
// attempt, which is retried as the execution's policy says. Return
// Permanent(err) to fail without retry, or the error of DelayFor /
// DelayUntil to park the execution and run it again later.
//
// ctx ends when the lease is lost, when Run's shutdown timeout passes,
// or when the worker dies; a handler should return promptly then.
type Handler func(ctx context.Context, job *Job) error

// Job is the handler's view of a claimed execution.
type Job struct {
	// ID, Lane, Kind and Namespace identify the execution.
	ID        model.ExecutionID
	Lane      string
	Kind      string
	Namespace string
	// Payload is the execution's input.
	Payload []byte
	// Attempt counts attempts from 0; AttemptType is initial, retry,
	// replay, reclaim or resumed.
	Attempt     int
	AttemptType string

	lease  *Lease
	result []byte
}

// SetResult sets the result stored when the handler returns nil.
func (j *Job) SetResult(b []byte) { j.result = b }

// Lease returns the job's lease for calls the Job does not wrap. A
// handler that ends the lease itself (Complete, Fail, ...) makes Run
// skip its own call.
func (j *Job) Lease() *Lease { return j.lease }

// ErrShutdown is the cause of a handler context cancelled because Run's
// shutdown timeout passed; the lease is handed back, not failed.
var ErrShutdown = errors.New("sdk: worker shutting down")

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks a handler error as not retryable: the execution fails
// terminally whatever its retry policy.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

// DelayError asks Run to park the execution until At (the same attempt
// continues then). Build it with DelayFor or DelayUntil.
type DelayError struct {
	// At is when the execution becomes eligible again.
	At time.Time
}

func (e *DelayError) Error() string { return "delay until " + e.At.Format(time.RFC3339Nano) }

// DelayFor returns a handler result that parks the execution for d.
func DelayFor(d time.Duration) error { return &delayFor{d: d} }

type delayFor struct{ d time.Duration }

func (e *delayFor) Error() string { return "delay for " + e.d.String() }

// DelayUntil returns a handler result that parks the execution until t.
func DelayUntil(t time.Time) error { return &DelayError{At: t} }

// Stats counts what a worker did since Connect.
type Stats struct {
	Claimed, Reclaimed, Resumed          int64
	Completed, Failed, Retried           int64
	Delayed, Suspended, HandedBack, Lost int64
	HandlerPanics, ClaimErrors, InFlight int64
}

type stats struct {
	claimed, reclaimed, resumed        atomic.Int64
	completed, failed, retried         atomic.Int64
	delayed, suspended, handedBack     atomic.Int64
	lost, panics, claimErrors, running atomic.Int64
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats {
	s := &w.stats
	return Stats{Claimed: s.claimed.Load(), Reclaimed: s.reclaimed.Load(), Resumed: s.resumed.Load(),
		Completed: s.completed.Load(), Failed: s.failed.Load(), Retried: s.retried.Load(),
		Delayed: s.delayed.Load(), Suspended: s.suspended.Load(), HandedBack: s.handedBack.Load(),
		Lost: s.lost.Load(), HandlerPanics: s.panics.Load(), ClaimErrors: s.claimErrors.Load(),
		InFlight: s.running.Load()}
}

// claimCallTimeout bounds one claim round trip of Run, which ctx does not
// cancel.
const claimCallTimeout = 10 * time.Second

// Run claims executions and runs handler on them, at most
// WorkerConfig.Concurrency at a time, until ctx ends or the worker is
// closed. Idle polling backs off from IdlePollMin to IdlePollMax once a
// whole sweep of the partitions found nothing, and resets on work.
//
// When ctx ends Run stops claiming and lets in-flight handlers finish
// for up to ShutdownTimeout; then it cancels their contexts (cause
// ErrShutdown), gives them one more second, and hands back every lease
// still held (ff_delay_execution to now) so nothing stays leased. It
// returns nil after a graceful stop.
func (w *Worker) Run(ctx context.Context, handler Handler) error {
	if handler == nil {
		return invalid("handler", "must not be nil")
	}
	var (
		wg      sync.WaitGroup
		slots   = make(chan struct{}, w.cfg.Concurrency)
		hctx    context.Context
		hcancel context.CancelCauseFunc
		idle    = w.cfg.IdlePollMin
		empty   = 0
		// perSweep empty claims in a row cover every partition once
		// (Valkey: a window of PartitionScanChunk per claim; Postgres:
		// one claim tries every lane on every partition).
		perSweep = max(w.claimer.SweepRounds(), 1)
	)
	hctx, hcancel = context.WithCancelCause(w.life)
	defer hcancel(nil)
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-w.life.Done():
			break loop
		case slots <- struct{}{}:
		}
		// Every free slot is claimed for in one round trip.
		n := 1
	grab:
		for n < w.cfg.Concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break grab
			}
		}
		// The claim is not cut short by ctx: a claim the server committed
		// as ctx ended would be lost to the client, its leases held by
		// nobody until they expired (every graceful stop stranding work
		// for a lease TTL). What it claimed runs as any claim does; only
		// the worker's end (Close, kill) and claimCallTimeout cut it.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), claimCallTimeout)
		unwatch := context.AfterFunc(w.life, ccancel)
		ls, cerr := w.ClaimBatch(cctx, n)
		unwatch()
		ccancel()
		for range n - len(ls) {
			<-slots
		}
		for _, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				freed := false
				free := func() {
					if !freed {
						freed = true
						<-slots
					}
				}
				defer free()
				// A completion claims the next execution in its own round
				// trip, and this slot runs it. Where the claim session
				// frees the slot before the lease-ending call (Postgres)
				// the slot is freed once the handler returns: Run claims
				// the next execution while the lease-ending call
				// (group-committed with the other slots') is in flight;
				// Run still waits for that call before it returns.
				for l != nil {
					l = w.handle(ctx, hctx, l, handler, free)
				}
			}()
		}
		switch {
		case errors.Is(cerr, ErrWorkerClosed):
			err = cerr
			break loop
		case cerr != nil:
			if ctx.Err() != nil {
				break loop
			}
			w.stats.claimErrors.Add(1)
			w.log.Warn("claim failed", "error", cerr)
			if len(ls) > 0 {
				continue
			}
			empty = perSweep // back off as if idle
		case len(ls) > 0:
			idle, empty = w.cfg.IdlePollMin, 0
			continue
		default:
			if empty++; empty < perSweep {
				continue
			}
		}
		t := time.NewTimer(idle)
		select {
		case <-ctx.Done():
		case <-w.life.Done():
		case <-t.C:
		case <-w.wakeCh(): // eligible work was just indexed on a lane of ours
		}
		t.Stop()
		idle = min(idle*2, w.cfg.IdlePollMax)
	}
	if w.life.Err() != nil {
		// Killed: nothing is handed back (a crash does no cleanup), but
		// the worker's own goroutines (heartbeat, renewals, notifications)
		// end with its life; wait for them, so that the caller may close
		// the client once Run has returned.
		w.stopBG()
		return nil
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(w.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
		return err
	case <-t.C:
	}
	hcancel(ErrShutdown)
	grace := time.NewTimer(time.Second)
	defer grace.Stop()
	select {
	case <-done:
		return err
	case <-grace.C:
	}
	// Handlers that ignore their context: release their leases anyway.
	w.mu.Lock()
	held := make([]*Lease, 0, len(w.leases))
	for l := range w.leases {
		if l.run {
			held = append(held, l)
		}
	}
	w.mu.Unlock()
	hb, cancel := context.WithTimeout(context.WithoutCancel(w.life), 5*time.Second)
	defer cancel()
	for _, l := range held {
		if herr := l.handBack(hb); herr != nil {
			w.log.Warn("hand back failed", "execution_id", l.ID, "error", herr)
		}
	}
	return err
}

// wakeCh is the channel that nudges an idle Run (nil, never ready,
// without notifications): keyevents on Valkey, LISTEN fabric_eligible on
// Postgres (backend.Claimer.Wake).
func (w *Worker) wakeCh() <-chan struct{} { return w.claimer.Wake() }

// handle runs one handler and ends the lease by its result. A completion
// while Run still claims (runCtx live) claims the next execution in the
// same round trip; that lease is returned for the caller to handle.
//
// Where the claim session says so (backend.Claimer.FreesSlotBeforeEnd:
// Postgres), free is called once the handler has returned, before the
// lease-ending call: the slot no longer runs a handler.
func (w *Worker) handle(runCtx, hctx context.Context, l *Lease, h Handler, free func()) (next *Lease) {
	w.stats.running.Add(1)
	defer w.stats.running.Add(-1)
	w.mu.Lock()
	l.run = true
	w.mu.Unlock()
	ctx, cancel := context.WithCancelCause(l.ctx)
	stop := context.AfterFunc(hctx, func() { cancel(context.Cause(hctx)) })
	defer stop()
	defer cancel(nil)
	job := &Job{ID: l.ID, Lane: l.Lane, Kind: l.Kind, Namespace: l.Namespace, Payload: l.Payload,
		Attempt: l.AttemptIndex, AttemptType: l.AttemptType, lease: l}
	herr := w.call(ctx, h, job)
	if w.life.Err() != nil {
		return nil // killed
	}
	if w.claimer.FreesSlotBeforeEnd() {
		free()
	}
	// Calls that end the lease get their own deadline, not the handler's.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(w.life), 10*time.Second)
	defer fcancel()
	var err error
	var de *DelayError
	var df *delayFor
	var pe *permanentError
	switch {
	case errors.Is(context.Cause(l.ctx), ErrLeaseLost):
		w.stats.lost.Add(1)
		return nil
	case errors.Is(context.Cause(hctx), ErrShutdown) || (herr != nil && errors.Is(herr, ErrShutdown)):
		err = l.handBack(fctx)
	case herr == nil && runCtx.Err() == nil && !w.isClosed():
		if next, err = w.completeAndClaim(fctx, l, job.result); err == nil {
			w.stats.completed.Add(1)
		}
	case herr == nil:
		if err = l.Complete(fctx, job.result); err == nil {
			w.stats.completed.Add(1)
		}
	case errors.As(herr, &df):
		err = w.delay(fctx, l, w.cfg.Clock().Add(df.d))
	case errors.As(herr, &de):
		err = w.delay(fctx, l, de.At)
	default:
		retry := errors.As(herr, &pe) == false
		err = w.fail(fctx, l, herr, retry)
	}
	if errors.Is(err, ErrLeaseFinished) {
		return next // the handler ended the lease itself
	}
	if err != nil {
		w.log.Warn("ending lease failed", "execution_id", l.ID, "error", err)
		w.rescue(fctx, l, err)
	}
	return next
}

// rescue ends a lease whose ending call failed while the server still
// holds it, so the execution is not stranded until its lease expires:
// the attempt fails with the cause under the execution's retry policy,
// and when that fails too the lease is handed back. A lease that is gone
// (ended, lost, or refused as gone) needs nothing; one that cannot be
// released at all is left to lease expiry and reclaim, and logged.
func (w *Worker) rescue(ctx context.Context, l *Lease, cause error) {
	if l.ending() {
		return
	}
	ferr := w.fail(ctx, l, fmt.Errorf("ending the attempt failed: %w", cause), true)
	if ferr == nil || l.ending() {
		return
	}
	if herr := l.handBack(ctx); herr != nil {
		w.log.Error("execution left to lease expiry and reclaim: its lease could not be failed or handed back",
			"execution_id", l.ID, "fail_error", ferr, "hand_back_error", herr)
	}
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, h Handler, job *Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.stats.panics.Add(1)
			w.log.Error("handler panicked", "execution_id", job.ID, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return h(ctx, job)
}
