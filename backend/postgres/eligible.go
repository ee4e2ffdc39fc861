package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// EligibleChannel is the NOTIFY channel of eligible work: the trigger
// fabric_exec_core_eligible_notify_trg (migrations/fabric/eligible_notify.sql)
// sends "<partition>:<lane>" for every execution that becomes runnable
// and eligible now (a payload without a partition, from a trigger before
// 2026-12-02, names the lane alone).
const EligibleChannel = "fabric_eligible"

// maxNotifiedPartitions bounds the (partition, lane) pairs an
// EligibleSubscription remembers between two Notified calls.
const maxNotifiedPartitions = 64

// parseEligible splits a fabric_eligible payload into its partition
// (-1 when it names none) and lane.
func parseEligible(payload string) (int, string) {
	head, lane, ok := strings.Cut(payload, ":")
	if !ok {
		return -1, payload
	}
	p, err := strconv.Atoi(head)
	if err != nil || p < 0 || p > math.MaxUint16 {
		return -1, payload
	}
	return p, lane
}

// workPlaces is where work became eligible, as a claim session learns it
// (from notifications, from its own scans), with a one-slot wake channel:
// many signals before a receive fold into one.
type workPlaces struct {
	c  chan struct{}
	mu sync.Mutex
	// set is the places noted since the last take, at most
	// maxNotifiedPartitions.
	set map[NotifiedWork]bool
}

func newWorkPlaces() *workPlaces {
	return &workPlaces{c: make(chan struct{}, 1), set: map[NotifiedWork]bool{}}
}

// note remembers w; beyond maxNotifiedPartitions it is dropped (a
// claimer's scan finds that work).
func (p *workPlaces) note(w NotifiedWork) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.set) < maxNotifiedPartitions {
		p.set[w] = true
	}
}

// take returns, and forgets, the noted places, in no order.
func (p *workPlaces) take() []NotifiedWork {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]NotifiedWork, 0, len(p.set))
	for w := range p.set {
		out = append(out, w)
	}
	clear(p.set)
	return out
}

// signal wakes the receiver of c, if it is not already due to wake.
func (p *workPlaces) signal() {
	select {
	case p.c <- struct{}{}:
	default:
	}
}

// EligibleSubscription wakes a worker when work becomes eligible on one
// of its lanes. Create it with SubscribeEligible.
type EligibleSubscription struct {
	// C receives a value when work became eligible on one of the lanes
	// (and after a reconnect, when notifications may have been missed).
	// It holds one pending wake: many notifications before a receive
	// fold into one.
	C <-chan struct{}

	places *workPlaces
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Close stops the subscription and waits for its goroutine; it is safe
// to call more than once.
func (s *EligibleSubscription) Close() {
	s.once.Do(s.cancel)
	<-s.done
}

// NotifiedWork is where work became eligible: a lane on a partition.
type NotifiedWork struct {
	Partition uint16
	Lane      string
}

// Notified returns, and forgets, where work became eligible (on one of
// the lanes) since the last call, in no order: a worker claims there
// before it scans every partition — a flow member lives on its flow's
// partition, not its lane's.
func (s *EligibleSubscription) Notified() []NotifiedWork { return s.places.take() }

// Note remembers w as if it had been notified (a claimer puts back what
// it did not get to). At most maxNotifiedPartitions are remembered;
// beyond them a worker finds the work by its scans.
func (s *EligibleSubscription) Note(w NotifiedWork) { s.places.note(w) }

// SubscribeEligible LISTENs on EligibleChannel over a dedicated
// connection and signals C for notifications naming one of lanes. It
// returns once LISTEN is registered; a lost connection is redialled every
// 200 ms, with a wake after each redial.
func (c *Client) SubscribeEligible(ctx context.Context, lanes []string) (*EligibleSubscription, error) {
	conn, err := c.dialListen(ctx, EligibleChannel)
	if err != nil {
		return nil, fmt.Errorf("subscribe eligible: %w", err)
	}
	places := newWorkPlaces()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &EligibleSubscription{C: places.c, places: places, cancel: cancel, done: make(chan struct{})}
	lanes = slices.Clone(lanes)
	go func() {
		defer close(s.done)
		c.eligibleLoop(sctx, conn, lanes, places)
	}()
	return s, nil
}

// dialListen opens a dedicated connection (LISTEN needs a session of its
// own) listening on channel.
func (c *Client) dialListen(ctx context.Context, channel string) (*pgx.Conn, error) {
	return c.dialSession(ctx, "LISTEN "+channel)
}

// dialSession opens a connection of its own, outside the pool, and runs
// setup on it (session settings, LISTEN).
func (c *Client) dialSession(ctx context.Context, setup string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if _, err := conn.Exec(ctx, setup); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%s: %w", setup, err)
	}
	return conn, nil
}

func (c *Client) eligibleLoop(ctx context.Context, conn *pgx.Conn, lanes []string, places *workPlaces) {
	signal := places.signal
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for {
		if conn == nil {
			var err error
			if conn, err = c.dialListen(ctx, EligibleChannel); err != nil {
				if ctx.Err() != nil {
					return
				}
				c.log.Warn("eligible listener: redial failed", "error", err)
				if !sleepCtx(ctx, 200*time.Millisecond) {
					return
				}
				continue
			}
			signal() // notifications may have been missed meanwhile
		}
		n, err := conn.WaitForNotification(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				c.log.Warn("eligible listener: connection lost", "error", err)
			}
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			if !sleepCtx(ctx, 200*time.Millisecond) {
				return
			}
			continue
		}
		if p, lane := parseEligible(n.Payload); slices.Contains(lanes, lane) {
			if p >= 0 {
				places.note(NotifiedWork{Partition: uint16(p), Lane: lane})
			}
			signal()
		}
	}
}
