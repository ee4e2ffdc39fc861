// Package startstop is the one start/stop contract of fabric's long-lived
// parts, after River's startstop: Start returns immediately, Started is a
// channel closed once running, Stop blocks until stopped and tolerates a
// service that was never started or is stopped twice.
//
//	type svc struct{ startstop.Base }
//
//	func (s *svc) Start(ctx context.Context) error {
//		ctx, ok, started, stopped := s.StartInit(ctx)
//		if !ok {
//			return nil
//		}
//		go func() {
//			started()
//			defer stopped()
//			<-ctx.Done()
//		}()
//		return nil
//	}
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStop is the cancellation cause of a context stopped by Stop.
var ErrStop = errors.New("service stopped")

// Base implements Started and Stop; embed it and call StartInit from
// Start. The zero value is ready to use.
type Base struct {
	mu        sync.Mutex
	running   bool
	cancel    context.CancelCauseFunc
	startedCh chan struct{}
	stoppedCh chan struct{}
}

// StartInit prepares a start. shouldStart is false when the service is
// already running (Start must then return nil without doing anything). The
// returned context is cancelled with ErrStop by Stop; the service calls
// started once it runs and stopped when its goroutine exits.
func (b *Base) StartInit(ctx context.Context) (_ context.Context, shouldStart bool, started, stopped func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running {
		return ctx, false, func() {}, func() {}
	}
	b.running = true
	ctx, b.cancel = context.WithCancelCause(ctx)
	b.startedCh = make(chan struct{})
	b.stoppedCh = make(chan struct{})
	startedCh, stoppedCh := b.startedCh, b.stoppedCh
	var once1, once2 sync.Once
	return ctx, true,
		func() { once1.Do(func() { close(startedCh) }) },
		func() {
			once2.Do(func() {
				once1.Do(func() { close(startedCh) })
				b.mu.Lock()
				b.running = false
				b.mu.Unlock()
				close(stoppedCh)
			})
		}
}

// Started returns a channel closed once the service runs (or a closed
// channel when it never started).
func (b *Base) Started() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.startedCh == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return b.startedCh
}

// Stop cancels the service with ErrStop and blocks until it stopped. It
// returns at once for a service that never started or already stopped.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel, stopped := b.cancel, b.stoppedCh
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel(ErrStop)
	<-stopped
}
