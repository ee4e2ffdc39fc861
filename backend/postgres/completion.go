package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

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

// CompletionWakeups subscribes to the completion events committed from
// now on (SubscribeCompletions from the tail) and sends the partition of
// every flow member's event: host.CompletionConfig.Wakeups, whose host
// then sweeps pg_dependency_reconciler on that partition at once instead
// of at its interval. It returns once LISTEN is registered; stop ends the
// subscription and closes the channel (the channel's reader may have
// stopped reading).
func (c *Client) CompletionWakeups(ctx context.Context) (_ <-chan model.Partition, stop func(), _ error) {
	sub, err := c.SubscribeCompletions(context.WithoutCancel(ctx), &SubscribeCompletionsParams{AfterEventID: -1})
	if err != nil {
		return nil, nil, err
	}
	out := make(chan model.Partition, 1024)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for {
			var ev CompletionEvent
			var ok bool
			select {
			case ev, ok = <-sub.C:
				if !ok {
					return
				}
			case <-quit:
				return
			}
			if ev.FlowID.IsZero() {
				continue // no flow, nothing to dispatch
			}
			select {
			case out <- ev.ExecutionID.Partition():
			case <-quit: // the reader stopped reading
				return
			}
		}
	}()
	return out, func() {
		close(quit)
		<-done
		sub.Close()
	}, nil
}
