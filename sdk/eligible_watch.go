package sdk

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// eligibleWatchRetry is the pause before a failed keyevent subscription
// is retried.
const eligibleWatchRetry = time.Second

// maxHotPartitions bounds how many notified partitions one ClaimNext
// round reads.
const maxHotPartitions = 64

// eligibleWatch learns which flow partitions just got eligible work on
// the worker's lanes from ZADD keyevents on lane:eligible, so that
// ClaimNext reads those partitions instead of polling every window, and
// an idle Run wakes at once instead of at its next poll. Polling stays as
// the safety net: notifications are best effort (CONFIG may be refused,
// a subscription may drop).
type eligibleWatch struct {
	lanes map[string]bool
	flow  uint16

	mu  sync.Mutex
	hot map[uint16]struct{}
	ch  chan struct{} // nudges an idle Run; capacity 1
	up  atomic.Bool   // subscribed
}

func newEligibleWatch(lanes []string, flowPartitions uint16) *eligibleWatch {
	e := &eligibleWatch{lanes: map[string]bool{}, flow: flowPartitions, hot: map[uint16]struct{}{}, ch: make(chan struct{}, 1)}
	for _, l := range lanes {
		e.lanes[l] = true
	}
	return e
}

// note records the partition of key when it is a lane:eligible index of
// one of the watched lanes ("ff:idx:{fp:N}:lane:<lane>:eligible").
func (e *eligibleWatch) note(key string) {
	rest, ok := strings.CutPrefix(key, "ff:idx:{fp:")
	if !ok {
		return
	}
	num, rest, ok := strings.Cut(rest, "}:lane:")
	if !ok {
		return
	}
	lane, ok := strings.CutSuffix(rest, ":eligible")
	if !ok || !e.lanes[lane] {
		return
	}
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || uint16(n) >= e.flow {
		return
	}
	e.mu.Lock()
	e.hot[uint16(n)] = struct{}{}
	e.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
	default:
	}
}

// take removes and returns up to maxHotPartitions notified partitions.
func (e *eligibleWatch) take() []model.Partition {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.hot) == 0 {
		return nil
	}
	out := make([]model.Partition, 0, min(len(e.hot), maxHotPartitions))
	for n := range e.hot {
		if len(out) == maxHotPartitions {
			break
		}
		delete(e.hot, n)
		out = append(out, model.Partition{Family: model.FamilyFlow, Index: n})
	}
	return out
}

// NotificationsUp reports whether the worker is subscribed to
// eligible-work notifications (false with DisableNotifications, on
// Postgres, and while the subscription is down).
func (w *Worker) NotificationsUp() bool {
	return w.wake != nil && w.wake.up.Load()
}

// watchEligible keeps the worker subscribed to ZADD keyevents until the
// worker's life ends. The notify flags are set again before every
// subscription: a restarted server (or cluster node) comes back without
// them. On a cluster it subscribes on every primary.
func (w *Worker) watchEligible() {
	defer w.bg.Done()
	warned := false
	for w.life.Err() == nil {
		if err := w.vc.EnableZaddKeyevents(w.life); err != nil && !warned {
			// Subscribe anyway: the operator (or a fabric host) may have
			// set the flags already.
			w.log.Info("could not enable keyspace notifications; relying on polling unless they are on", "error", err)
			warned = true
		}
		err := w.vc.WatchZaddKeyevents(w.life, w.wake.note, func() { w.wake.up.Store(true) })
		w.wake.up.Store(false)
		if w.life.Err() != nil {
			return
		}
		if errors.Is(err, valkey.ErrPrimariesChanged) {
			w.log.Info("eligible-work notifications: cluster primaries changed; resubscribing", "error", err)
			continue
		}
		w.log.Warn("eligible-work notifications lost; polling until resubscribed", "error", err)
		t := time.NewTimer(eligibleWatchRetry)
		select {
		case <-w.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
