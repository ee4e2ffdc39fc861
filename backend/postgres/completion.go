package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fabric-host/fabric/model"
)

// CompletionChannel is the NOTIFY channel of ff_completion_event inserts;
// the payload is the event id.
const CompletionChannel = "ff_completion"

// CompletionEvent is one ff_completion_event row.
type CompletionEvent struct {
	EventID      int64
	ExecutionID  model.ExecutionID
	FlowID       model.UUID
	Outcome      string
	Namespace    string
	InstanceTag  string
	OccurredAtMs int64
}

// SubscribeCompletionsParams are the inputs of SubscribeCompletions.
type SubscribeCompletionsParams struct {
	// AfterEventID resumes strictly after this event id; negative means
	// the tail (events committed after the subscription starts).
	AfterEventID int64
	// Buffer is the channel capacity (default 1024).
	Buffer int
}

// CompletionSubscription delivers completion events in event-id order.
//
// # Notes
//
//   - It owns one dedicated connection (LISTEN needs a session; never a
//     pooled one). A lost connection is redialled after 200 ms and the
//     catch-up query replays from the cursor, so no committed event is
//     missed; NOTIFY is only a wake-up.
//   - Close stops it and closes C; it is safe to call more than once.
type CompletionSubscription struct {
	// C receives the events; it is closed when the subscription stops.
	C      <-chan CompletionEvent
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	err    error
}

// Close stops the subscription and waits for its goroutine.
func (s *CompletionSubscription) Close() {
	s.once.Do(s.cancel)
	<-s.done
}

// Err is the error that stopped the subscription, nil after Close.
func (s *CompletionSubscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// SubscribeCompletions LISTENs on ff_completion over a dedicated connection
// and streams ff_completion_event rows after the cursor. It returns once
// LISTEN is registered.
func (c *Client) SubscribeCompletions(ctx context.Context, p *SubscribeCompletionsParams) (*CompletionSubscription, error) {
	buf := p.Buffer
	if buf <= 0 {
		buf = 1024
	}
	conn, err := c.listenConn(ctx)
	if err != nil {
		return nil, err
	}
	cursor := p.AfterEventID
	if cursor < 0 {
		if err := conn.QueryRow(ctx, "SELECT COALESCE(MAX(event_id), 0) FROM ff_completion_event").Scan(&cursor); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("subscribe completions: %w", err)
		}
	}
	out := make(chan CompletionEvent, buf)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &CompletionSubscription{C: out, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(out)
		err := c.listenLoop(sctx, conn, cursor, out)
		if err != nil && !errors.Is(err, context.Canceled) {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
	}()
	return s, nil
}

func (c *Client) listenConn(ctx context.Context) (*pgx.Conn, error) {
	conn, err := c.dialListen(ctx, CompletionChannel)
	if err != nil {
		return nil, fmt.Errorf("subscribe completions: %w", err)
	}
	// catchUp reads every partition of ff_completion_event by event id: a
	// custom plan would plan all 256 children on each call (measured ~100
	// ms under the demo); the generic plan is built once per connection
	// and kept until a child's statistics change.
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("subscribe completions: %w", err)
	}
	return conn, nil
}

func (c *Client) listenLoop(ctx context.Context, conn *pgx.Conn, cursor int64, out chan<- CompletionEvent) error {
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for {
		var err error
		if conn == nil {
			if conn, err = c.listenConn(ctx); err != nil {
				c.log.Warn("completion listener: redial failed", "error", err)
				if !sleepCtx(ctx, 200*time.Millisecond) {
					return ctx.Err()
				}
				continue
			}
		}
		if cursor, err = catchUp(ctx, conn, cursor, out); err == nil {
			_, err = conn.WaitForNotification(ctx)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			c.log.Warn("completion listener: connection lost", "error", err)
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			if !sleepCtx(ctx, 200*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
}

// catchUp delivers every event after cursor, 256 at a time, and returns
// the new cursor.
func catchUp(ctx context.Context, conn *pgx.Conn, cursor int64, out chan<- CompletionEvent) (int64, error) {
	for {
		rows, err := conn.Query(ctx, `
SELECT event_id, partition_key, execution_id, flow_id, outcome, COALESCE(namespace, ''), COALESCE(instance_tag, ''), occurred_at_ms
  FROM ff_completion_event WHERE event_id > $1 ORDER BY event_id LIMIT 256`, cursor)
		if err != nil {
			return cursor, err
		}
		evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CompletionEvent, error) {
			var ev CompletionEvent
			var part int16
			var eid [16]byte
			var flow *[16]byte
			err := r.Scan(&ev.EventID, &part, &eid, &flow, &ev.Outcome, &ev.Namespace, &ev.InstanceTag, &ev.OccurredAtMs)
			ev.ExecutionID = execKey{part: part, uuid: eid}.execID()
			if flow != nil {
				ev.FlowID = *flow
			}
			return ev, err
		})
		if err != nil {
			return cursor, err
		}
		for _, ev := range evs {
			select {
			case out <- ev:
			case <-ctx.Done():
				return cursor, ctx.Err()
			}
			cursor = ev.EventID
		}
		if len(evs) < 256 {
			return cursor, nil
		}
	}
}

// sleepCtx sleeps d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// DependencySafetyInterval is pg_dependency_reconciler's sweep interval
// when CompletionWakeups feeds the host (`fabric run --backend postgres`,
// the bench's Postgres engine): every flow member's completion already
// sweeps its partition at once, so the plugin's own sweep of every flow
// partition (one scan transaction each, 270–630 ms for 256 partitions on
// 2 cores, and the tail of the DAG latency when it overlaps a level) is
// only the safety net for an event whose wake-up was lost (one committed
// out of event-id order while the listener reconnected, or a wake-up
// sweep that failed): such an event is dispatched within this interval.
// Ten times the plugin's stock 1 s, as the Valkey host's due-time timers
// poll for safety (host.TimerSafetyFactorDefault).
const DependencySafetyInterval = 10 * time.Second

// CompletionWakeupChannel is the NOTIFY channel of fabric's own trigger
// on ff_completion_event (migrations/fabric/completion_notify.sql): one
// notification per flow member's event, payload
// "<partition_key>:<event_id>". FlowFabric's ff_completion (payload the
// event id) is left as it is.
const CompletionWakeupChannel = "fabric_completion"

// completionWakeupTrigger is the trigger that sends CompletionWakeupChannel.
const completionWakeupTrigger = "fabric_completion_event_notify_trg"

// CompletionWakeups sends the partition of every flow member's completion
// event committed from now on: host.CompletionConfig.Wakeups, whose host
// then sweeps pg_dependency_reconciler on that partition at once instead
// of at its interval. It returns once LISTEN is registered; stop ends it
// and closes the channel (the channel's reader may have stopped reading).
//
// # Notes
//
//   - It LISTENs on CompletionWakeupChannel, whose payload names the
//     partition: no query per event. On a database migrated before that
//     trigger existed (only FlowFabric's ff_completion), it LISTENs there
//     and reads the partitions of the events after its cursor on each
//     notification, as SubscribeCompletions does.
//   - One dedicated connection; a lost one is redialled after 200 ms and
//     the events committed after the cursor (the highest event id handed
//     over) are read from the table before listening again, so no wake-up
//     of an event committed in id order is lost. One committed out of id
//     order while disconnected is left to the reconciler's own sweep
//     (DependencySafetyInterval).
func (c *Client) CompletionWakeups(ctx context.Context) (_ <-chan model.Partition, stop func(), _ error) {
	conn, direct, err := c.wakeupConn(ctx)
	if err != nil {
		return nil, nil, err
	}
	var cursor int64
	if err := conn.QueryRow(ctx, "SELECT COALESCE(MAX(event_id), 0) FROM ff_completion_event").Scan(&cursor); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("completion wake-ups: %w", err)
	}
	out := make(chan model.Partition, 1024)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		c.wakeupLoop(wctx, conn, direct, cursor, out)
	}()
	return out, func() {
		cancel()
		<-done
	}, nil
}

// wakeupConn dials CompletionWakeups' connection: LISTEN
// CompletionWakeupChannel when fabric's trigger exists (direct), else
// LISTEN ff_completion.
func (c *Client) wakeupConn(ctx context.Context) (_ *pgx.Conn, direct bool, _ error) {
	if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger
 WHERE tgname = $1 AND tgrelid = 'ff_completion_event'::regclass)`, completionWakeupTrigger).Scan(&direct); err != nil {
		return nil, false, fmt.Errorf("completion wake-ups: %w", err)
	}
	if !direct {
		conn, err := c.listenConn(ctx)
		return conn, false, err
	}
	conn, err := c.dialListen(ctx, CompletionWakeupChannel)
	if err != nil {
		return nil, false, fmt.Errorf("completion wake-ups: %w", err)
	}
	// The catch-up after a redial reads every partition by event id (see
	// listenConn).
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, false, fmt.Errorf("completion wake-ups: %w", err)
	}
	return conn, true, nil
}

// wakeupLoop hands wake-ups to out until ctx ends: each
// CompletionWakeupChannel notification's partition at once; on an
// ff_completion notification, and after every redial, the partitions of
// the events after cursor, read from the table.
func (c *Client) wakeupLoop(ctx context.Context, conn *pgx.Conn, direct bool, cursor int64, out chan<- model.Partition) {
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	send := func(pk int64) bool {
		select {
		case out <- model.Partition{Family: model.FamilyFlow, Index: uint16(pk)}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// After a redial, the events committed while disconnected are read
	// from the table (and on ff_completion, on each notification).
	first := true
	for {
		var err error
		if conn == nil {
			if conn, direct, err = c.wakeupConn(ctx); err != nil {
				c.log.Warn("completion wake-ups: redial failed", "error", err)
				if !sleepCtx(ctx, 200*time.Millisecond) {
					return
				}
				continue
			}
		}
		if !first || !direct {
			cursor, err = catchUpPartitions(ctx, conn, cursor, send)
		}
		first = false
		for err == nil {
			var n *pgconn.Notification
			if n, err = conn.WaitForNotification(ctx); err != nil {
				break
			}
			if n.Channel != CompletionWakeupChannel {
				cursor, err = catchUpPartitions(ctx, conn, cursor, send)
				continue
			}
			pk, eid, ok := parseWakeup(n.Payload)
			if !ok {
				c.log.Warn("completion wake-ups: bad payload dropped", "payload", n.Payload)
				continue
			}
			if !send(pk) {
				return
			}
			cursor = max(cursor, eid)
		}
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("completion wake-ups: connection lost", "error", err)
		conn.Close(context.WithoutCancel(ctx))
		conn = nil
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// parseWakeup parses a CompletionWakeupChannel payload
// "<partition_key>:<event_id>".
func parseWakeup(payload string) (pk, eid int64, ok bool) {
	a, b, found := strings.Cut(payload, ":")
	if !found {
		return 0, 0, false
	}
	pk, err1 := strconv.ParseInt(a, 10, 64)
	eid, err2 := strconv.ParseInt(b, 10, 64)
	return pk, eid, err1 == nil && err2 == nil && pk >= 0 && pk <= 0xffff
}

// catchUpPartitions sends the partition of every flow member's event
// after cursor, 256 events at a time, and returns the new cursor.
func catchUpPartitions(ctx context.Context, conn *pgx.Conn, cursor int64, send func(pk int64) bool) (int64, error) {
	for {
		rows, err := conn.Query(ctx, `
SELECT event_id, partition_key, flow_id IS NOT NULL
  FROM ff_completion_event WHERE event_id > $1 ORDER BY event_id LIMIT 256`, cursor)
		if err != nil {
			return cursor, err
		}
		type ev struct {
			id, pk int64
			flow   bool
		}
		evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ev, error) {
			var e ev
			var pk int16
			err := r.Scan(&e.id, &pk, &e.flow)
			e.pk = int64(pk)
			return e, err
		})
		if err != nil {
			return cursor, err
		}
		for _, e := range evs {
			if e.flow && !send(e.pk) {
				return cursor, ctx.Err()
			}
			cursor = e.id
		}
		if len(evs) < 256 {
			return cursor, nil
		}
	}
}
