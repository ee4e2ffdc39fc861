package postgres

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// Creating an execution that is eligible at once fires
// fabric_exec_core_eligible_notify_trg, and a NOTIFY serialises commits:
// Postgres holds one lock for every database of the cluster from the
// NOTIFY's queueing to the end of the commit. With a NOTIFY in every
// create, producers and the workers' claims (whose ff_lease_event rows
// notify too, FlowFabric's trigger) queued on that lock, most of the time
// under load (measured: 2-4× the throughput at 8 handlers without it).
//
// So a Client lets one create per (partition, lane) notify inline and
// quiets the trigger for the creates that follow within
// eligibleNotifyWindow (SET LOCAL fabric.eligible_notify = off, read by
// the trigger): after such a quiet create commits, it makes sure one
// NOTIFY with the same payload follows, sent on its own no earlier than
// the window after the last one. An idle worker so still hears of every
// new execution, at most the window after its commit; a busy worker
// claims again as soon as a slot frees and needs no wake. Executions made
// eligible by anything else (promotion, retry, dependencies, other
// writers) notify as before.

// eligibleNotifyWindow is the least time between two fabric_eligible
// NOTIFYs a Client sends for one (partition, lane) from its creates.
const eligibleNotifyWindow = 10 * time.Millisecond

// maxEligibleNoteKeys bounds the (partition, lane) pairs remembered;
// beyond it the oldest are forgotten (a forgotten pair notifies inline
// again).
const maxEligibleNoteKeys = 4096

// sqlQuietEligible quiets fabric_notify_eligible for the rest of the
// transaction.
const sqlQuietEligible = `SELECT set_config('fabric.eligible_notify', 'off', true)`

type eligibleKey struct {
	part int16
	lane string
}

type eligibleNote struct {
	last    time.Time   // the last NOTIFY, inline or trailing
	trailer *time.Timer // the trailing NOTIFY pending, if any
	fire    func()      // what trailer runs
}

// eligibleNotes is a Client's record of the fabric_eligible NOTIFYs its
// creates sent. The zero value is ready.
type eligibleNotes struct {
	// window overrides eligibleNotifyWindow when set (tests).
	window time.Duration
	mu     sync.Mutex
	keys   map[eligibleKey]*eligibleNote
	closed bool
	wg     sync.WaitGroup // trailing NOTIFYs in flight
}

// inline reports whether a create of an eligible execution on (part,
// lane) at now may notify as it commits (and records that it does);
// false: it runs quiet and calls quietDone once committed.
func (e *eligibleNotes) inline(part int16, lane string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.entry(eligibleKey{part, lane})
	if now.Sub(n.last) >= e.windowLen() && n.trailer == nil { // a new pair's last is the zero time
		n.last = now
		return true
	}
	return false
}

func (e *eligibleNotes) windowLen() time.Duration {
	if e.window > 0 {
		return e.window
	}
	return eligibleNotifyWindow
}

// entry returns k's record, a new one (never notified) if there is none;
// at maxEligibleNoteKeys the pairs with no trailing NOTIFY pending (all
// of them, most of the time) are forgotten first. e.mu is held.
func (e *eligibleNotes) entry(k eligibleKey) *eligibleNote {
	if n := e.keys[k]; n != nil {
		return n
	}
	if e.keys == nil {
		e.keys = map[eligibleKey]*eligibleNote{}
	}
	if len(e.keys) >= maxEligibleNoteKeys {
		for k, n := range e.keys {
			if n.trailer == nil {
				delete(e.keys, k)
			}
		}
	}
	n := &eligibleNote{}
	e.keys[k] = n
	return n
}

// quietDone is called once a quiet create on (part, lane) committed: a
// trailing NOTIFY is made pending unless one already is, to be sent by
// send the window after the last NOTIFY (at once if that has passed).
func (e *eligibleNotes) quietDone(part int16, lane string, send func(ctx context.Context, part int16, lane string)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	n := e.entry(eligibleKey{part, lane})
	if n.trailer != nil {
		return // pending: it is sent after this create committed
	}
	wait := max(e.windowLen()-time.Since(n.last), 0)
	e.wg.Add(1)
	n.fire = func() {
		defer e.wg.Done()
		// No longer pending from here: a quiet create that commits from
		// now on may commit after this NOTIFY, so it makes a trailer of
		// its own.
		e.mu.Lock()
		n.last, n.trailer, n.fire = time.Now(), nil, nil
		e.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		send(ctx, part, lane)
	}
	n.trailer = time.AfterFunc(wait, n.fire)
}

// close sends the trailing NOTIFYs still pending at once and waits for
// every one in flight.
func (e *eligibleNotes) close() {
	e.mu.Lock()
	e.closed = true
	var now []func()
	for _, n := range e.keys {
		if n.trailer != nil && n.trailer.Stop() { // not fired: fire it here
			now = append(now, n.fire)
		}
	}
	e.mu.Unlock()
	for _, f := range now {
		f()
	}
	e.wg.Wait()
}

// eligiblePayload is the fabric_eligible payload the trigger sends for an
// execution on part in lane.
func eligiblePayload(part int16, lane string) string {
	return strconv.Itoa(int(part)) + ":" + lane
}

// notifyEligible sends one fabric_eligible NOTIFY for (part, lane), the
// trailing one of quiet creates. A failure is logged: an idle worker then
// finds the work at its next poll.
func (c *Client) notifyEligible(ctx context.Context, part int16, lane string) {
	payload := eligiblePayload(part, lane)
	if _, err := c.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, EligibleChannel, payload); err != nil {
		c.log.Warn("eligible notification failed; idle workers find the work at their next poll", "lane", lane, "error", err)
	}
}
