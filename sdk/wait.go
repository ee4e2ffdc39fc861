package sdk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fabric-host/fabric/model"
)

// Wake-up intervals of Wait: the read Wait makes when no wake-up came
// while the watch is up (a safety net for a lost one), and its reads
// while the watch is down (the server refuses the keyevent CONFIG, or the
// subscription is reconnecting).
const (
	waitSafetyInterval = 5 * time.Second
	waitPollInterval   = 250 * time.Millisecond
)

// Wait blocks until execution id is terminal and returns its final state
// (completed, failed, cancelled, expired or skipped: ExecutionState's
// PublicState and TerminalOutcome say which; Result reads a completed
// one's result). It returns at once for an execution already terminal,
// and ctx's error when ctx ends first.
//
// It is pushed, not polled: the client's one watch of terminal
// transitions (Driver.WatchTerminal: ZADD keyevents of the terminal
// indexes on Valkey, LISTEN ff_completion on Postgres), started by the
// first Wait and stopped by Close, wakes the Waits of the ended
// execution's partition, which read its state once. While the watch is
// down — a Valkey server that refuses CONFIG, a reconnect — Wait reads
// the state every 250 ms instead; with it up, once every 5 s as a safety
// net.
func (c *Client) Wait(ctx context.Context, id model.ExecutionID) (*ExecutionState, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, invalid("id", "%v", err)
	}
	w := c.waits.add(c, int(id.Partition().Index))
	defer c.waits.remove(w)
	for {
		st, err := c.State(ctx, id)
		if err != nil {
			return nil, err
		}
		if st.Terminal() {
			return st, nil
		}
		t := time.NewTimer(c.waits.interval())
		select {
		case <-w.wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("wait for %s (%s): %w", id, st.PublicState, ctx.Err())
		}
		t.Stop()
	}
}

// waitHub is the client's watch of terminal transitions and the Waits it
// wakes.
type waitHub struct {
	mu      sync.Mutex
	waiters map[*waiter]struct{}
	up      bool
	cancel  context.CancelFunc // nil until the first Wait starts the watch
	done    chan struct{}
}

// waiter is one Wait: its execution's partition and its wake-up.
type waiter struct {
	partition int
	wake      chan struct{}
}

// add registers a waiter, starting the watch on the first one.
func (h *waitHub) add(c *Client, partition int) *waiter {
	w := &waiter{partition: partition, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters == nil {
		h.waiters = map[*waiter]struct{}{}
	}
	h.waiters[w] = struct{}{}
	if h.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel, h.done = cancel, make(chan struct{})
		go h.watch(ctx, c)
	}
	return w
}

func (h *waitHub) remove(w *waiter) {
	h.mu.Lock()
	delete(h.waiters, w)
	h.mu.Unlock()
}

// interval is how long a Wait waits for a wake-up before reading again.
func (h *waitHub) interval() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.up {
		return waitSafetyInterval
	}
	return waitPollInterval
}

// wakeUp wakes the waiters of partition (every waiter for -1).
func (h *waitHub) wakeUp(partition int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		if partition < 0 || w.partition == partition {
			select {
			case w.wake <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
	}
}

// setUp records the watch's state; coming up wakes every waiter, whose
// read then sees whatever ended before the subscription.
func (h *waitHub) setUp(up bool) {
	h.mu.Lock()
	h.up = up
	h.mu.Unlock()
	if up {
		h.wakeUp(-1)
	}
}

// watch runs the driver's watch until ctx ends, subscribing again after a
// break (1 s, doubling to 30 s while it keeps failing).
func (h *waitHub) watch(ctx context.Context, c *Client) {
	defer close(h.done)
	backoff := time.Second
	for {
		err := c.drv.WatchTerminal(ctx, h.wakeUp, func() { h.setUp(true) })
		h.setUp(false)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("sdk: the watch of terminal transitions stopped; Wait reads states every 250 ms until it is back",
			"err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// stop ends the watch and waits for it.
func (h *waitHub) stop() {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
