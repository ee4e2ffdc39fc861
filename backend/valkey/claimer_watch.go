package valkey

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/model"
)

// eligibleWatchRetry is the pause before a failed keyevent subscription
// is retried.
const eligibleWatchRetry = time.Second

// maxHotPartitions bounds how many notified partitions one Claim
// round reads.
const maxHotPartitions = 64

// eligibleWatch learns which flow partitions just got eligible work on
// the worker's lanes from ZADD keyevents on lane:eligible, so that
// Claim reads those partitions instead of polling every window, and
// an idle worker wakes at once (Wake) instead of at its next poll. Polling stays as
// the safety net: notifications are best effort (CONFIG may be refused,
// a subscription may drop).
type eligibleWatch struct {
	lanes map[string]bool
	flow  uint16

	mu  sync.Mutex
	hot map[uint16]struct{}
	ch  chan struct{} // nudges an idle worker (Wake); capacity 1
	up  atomic.Bool   // subscribed
	// seq counts the notifications of each partition; empty holds, per
	// solo partition and lane, the seq a fabric_claim_next found the lane
	// empty under (see knownEmpty).
	seq   map[uint16]uint64
	empty map[soloLane]emptyMark
	gen   uint64 // bumped by every setUp
}

// soloLane is a lane on its solo partition.
type soloLane struct {
	part uint16
	lane string
}

// emptyMark is a fabric_claim_next that found no head: the partition's
// notification count and the subscription's generation when it was sent
// (ok: the subscription was up then), and when.
type emptyMark struct {
	seq, gen uint64
	ok       bool
	at       time.Time
}

// soloEmptyFor bounds how long a lane seen empty is trusted without a
// notification: the safety net for a notification lost without the
// subscription dropping.
const soloEmptyFor = notifiedWindowEvery

func newEligibleWatch(lanes []string, flowPartitions uint16) *eligibleWatch {
	e := &eligibleWatch{lanes: map[string]bool{}, flow: flowPartitions, hot: map[uint16]struct{}{}, ch: make(chan struct{}, 1),
		seq: map[uint16]uint64{}, empty: map[soloLane]emptyMark{}}
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
	e.seq[uint16(n)]++
	e.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
	default:
	}
}

// before is read before a fabric_claim_next on p is sent (markEmpty).
func (e *eligibleWatch) before(p model.Partition) emptyMark {
	e.mu.Lock()
	defer e.mu.Unlock()
	return emptyMark{seq: e.seq[p.Index], gen: e.gen, ok: e.up.Load()}
}

// markEmpty records that a fabric_claim_next of lane on p, sent at m
// (before), found no head at all (empty), or forgets an earlier mark
// (not empty). A call sent while the subscription was down marks
// nothing.
func (e *eligibleWatch) markEmpty(p model.Partition, lane string, m emptyMark, empty bool, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := soloLane{part: p.Index, lane: lane}
	if empty && m.ok && m.gen == e.gen {
		m.at = now
		e.empty[k] = m
	} else {
		delete(e.empty, k)
	}
}

// knownEmpty reports whether lane on p is known to have no eligible
// head: a fabric_claim_next found none, nothing was ZADDed to p's
// eligible indexes since it was sent (a ZADD after it would have been
// notified, and a ZADD before it was seen by it), notifications have been
// up all along, and the mark is younger than soloEmptyFor. Asking again
// would only cost the server an empty call.
func (e *eligibleWatch) knownEmpty(p model.Partition, lane string, now time.Time) bool {
	if !e.up.Load() {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.empty[soloLane{part: p.Index, lane: lane}]
	return ok && m.gen == e.gen && m.seq == e.seq[p.Index] && !now.Before(m.at) && now.Sub(m.at) < soloEmptyFor
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

// watchEligible keeps the claimer subscribed to ZADD keyevents until it
// is closed. The claimers of one client share one subscription
// (keyeventHub): every ZADD of the database is published to every
// subscriber, so a subscription per worker made the server send each
// notification once per worker of the process.
func (cl *Claimer) watchEligible() {
	defer close(cl.watchDone)
	h := joinKeyeventHub(cl.vc, cl.log, cl.wake)
	<-cl.stop
	h.leave(cl.wake)
}

// keyeventHub is the one ZADD keyevent subscription of a client, shared
// by its workers' eligibleWatches: every notified key goes to each of
// them, and each is up while the subscription is.
type keyeventHub struct {
	vc  *Client
	log *slog.Logger

	mu       sync.Mutex
	watchers map[*eligibleWatch]struct{}
	up       bool

	cancel context.CancelFunc
	done   chan struct{} // closed when the subscription loop has ended
}

var (
	hubsMu sync.Mutex
	hubs   = map[*Client]*keyeventHub{}
)

// joinKeyeventHub adds e to vc's hub, starting the hub (and its
// subscription) for the client's first watcher.
func joinKeyeventHub(vc *Client, log *slog.Logger, e *eligibleWatch) *keyeventHub {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	h := hubs[vc]
	if h == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h = &keyeventHub{vc: vc, log: log, watchers: map[*eligibleWatch]struct{}{}, cancel: cancel, done: make(chan struct{})}
		hubs[vc] = h
		go h.run(ctx)
	}
	h.mu.Lock()
	h.watchers[e] = struct{}{}
	e.setUp(h.up)
	h.mu.Unlock()
	return h
}

// leave removes e; the last watcher to leave ends the subscription and
// waits for it, so that no goroutine of the hub uses the client once
// every worker's goroutines have ended.
func (h *keyeventHub) leave(e *eligibleWatch) {
	hubsMu.Lock()
	h.mu.Lock()
	delete(h.watchers, e)
	e.setUp(false)
	last := len(h.watchers) == 0
	h.mu.Unlock()
	if last && hubs[h.vc] == h {
		delete(hubs, h.vc)
	}
	hubsMu.Unlock()
	if last {
		h.cancel()
		<-h.done
	}
}

func (h *keyeventHub) note(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for e := range h.watchers {
		e.note(key)
	}
}

func (h *keyeventHub) setUp(up bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.up = up
	for e := range h.watchers {
		e.setUp(up)
	}
}

// setUp marks the subscription up or down. Lanes seen empty are
// forgotten either way: a notification may have been missed while it
// was down.
func (e *eligibleWatch) setUp(up bool) {
	e.mu.Lock()
	clear(e.empty)
	e.gen++
	e.up.Store(up)
	e.mu.Unlock()
}

// run keeps the subscription until ctx ends. The notify flags are set
// again before every subscription: a restarted server (or cluster node)
// comes back without them. On a cluster it subscribes on every primary.
func (h *keyeventHub) run(ctx context.Context) {
	defer close(h.done)
	warned := false
	for ctx.Err() == nil {
		if err := h.vc.EnableZaddKeyevents(ctx); err != nil && !warned && ctx.Err() == nil {
			// Subscribe anyway: the operator (or a fabric host) may have
			// set the flags already.
			h.log.Info("could not enable keyspace notifications; relying on polling unless they are on", "error", err)
			warned = true
		}
		err := h.vc.WatchZaddKeyevents(ctx, h.note, func() { h.setUp(true) })
		h.setUp(false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrPrimariesChanged) {
			h.log.Info("eligible-work notifications: cluster primaries changed; resubscribing", "error", err)
			continue
		}
		h.log.Warn("eligible-work notifications lost; polling until resubscribed", "error", err)
		t := time.NewTimer(eligibleWatchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
