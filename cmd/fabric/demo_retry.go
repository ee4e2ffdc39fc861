package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend"
)

// Transient-error retry of the demo workload's submissions: a backend
// that is busy (a long script: BUSY), still loading its data (LOADING),
// failing over (TRYAGAIN, CLUSTERDOWN, MASTERDOWN) or whose connection was
// reset answers again soon, so the submitter waits and tries again rather
// than ending the run.
const (
	// demoRetryFirst is the first pause; each retry doubles it up to
	// demoRetryMax.
	demoRetryFirst = 50 * time.Millisecond
	demoRetryMax   = 2 * time.Second
	// demoRetryFor bounds the retries of one operation: past it the item
	// is reported and dropped, and submission goes on.
	demoRetryFor = 30 * time.Second
)

// transientLog counts and reports the transient errors the workload met.
type transientLog struct {
	retried, dropped atomic.Int64
	// isTransient classifies an error: the backend's
	// (backend.Driver.IsTransient); backend.NetworkTransient when nil.
	isTransient func(error) bool
}

// retry runs op until it succeeds, fails for good, or has failed
// transiently for demoRetryFor; each transient failure is reported
// through report and waited out with a doubling pause. ctx ends the
// waits.
func (t *transientLog) retry(ctx context.Context, what string, report func(string), op func() error) error {
	pause := demoRetryFirst
	var deadline time.Time
	for {
		err := op()
		transient := backend.NetworkTransient
		if t.isTransient != nil {
			transient = t.isTransient
		}
		if err == nil || !transient(err) {
			return err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(demoRetryFor)
		}
		if now.After(deadline) {
			t.dropped.Add(1)
			return &transientError{what: what, err: err}
		}
		t.retried.Add(1)
		report(fmt.Sprintf("demo: %s: transient backend error, retrying in %s: %v", what, pause, err))
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("demo: %s: %w (after a transient error: %v)", what, ctx.Err(), err)
		case <-timer.C:
		}
		pause = min(2*pause, demoRetryMax)
	}
}

// transientError is an operation still failing transiently after
// demoRetryFor: the item is dropped, the workload goes on.
type transientError struct {
	what string
	err  error
}

func (e *transientError) Error() string {
	return fmt.Sprintf("demo: %s: still failing after %s of retries: %v", e.what, demoRetryFor, e.err)
}

func (e *transientError) Unwrap() error { return e.err }
