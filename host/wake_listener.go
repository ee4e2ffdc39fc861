package host

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/internal/startstop"
)

// keyeventSource is what the wake listener needs of the backend (part of
// Backend).
type keyeventSource interface {
	EnableZaddKeyevents(ctx context.Context) error
	WatchZaddKeyevents(ctx context.Context, onKey func(key string), onUp func()) error
}

// wakeListener is the due-timer wake service: it subscribes to zadd
// keyevents of the backend's database and hands every key to route. It
// reconnects after retry until stopped; on a cluster it subscribes on
// every primary and starts over at once when the primaries change (a
// restarted node gets its notify flags back then). Up reports whether the
// subscription is live; every time it comes up, resumed is called
// (notifications may have been missed while it was down).
type wakeListener struct {
	startstop.Base

	src keyeventSource
	// configSet: CONFIG SET the notify flags before each subscription.
	configSet bool
	retry     time.Duration
	logger    *slog.Logger
	route     func(key string)
	resumed   func()

	up atomic.Bool
}

// Up reports whether the subscription is live.
func (w *wakeListener) Up() bool { return w != nil && w.up.Load() }

// Start subscribes in the background and returns at once.
func (w *wakeListener) Start(ctx context.Context) error {
	ctx, ok, started, stopped := w.StartInit(ctx)
	if !ok {
		return nil
	}
	go func() {
		defer stopped()
		started()
		w.run(ctx)
	}()
	return nil
}

func (w *wakeListener) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := w.listenOnce(ctx)
		w.up.Store(false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, backend.ErrTopologyChanged) {
			w.logger.Info("due-timer wake subscription: cluster primaries changed; resubscribing", "error", err)
			continue
		}
		w.logger.Warn("due-timer wake subscription failed; polling at plugin intervals until it is back", "error", err, "retry_in_ms", w.retry.Milliseconds())
		if !sleep(ctx, w.retry) {
			return
		}
	}
}

func (w *wakeListener) listenOnce(ctx context.Context) error {
	if w.configSet {
		if err := w.src.EnableZaddKeyevents(ctx); err != nil {
			return err
		}
	}
	return w.src.WatchZaddKeyevents(ctx, w.route, func() {
		w.up.Store(true)
		w.resumed()
	})
}
