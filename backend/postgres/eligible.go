package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// EligibleChannel is the NOTIFY channel of eligible work: the trigger
// fabric_exec_core_eligible_notify_trg (migrations/fabric/eligible_notify.sql)
// sends the lane of every execution that becomes runnable and eligible
// now.
const EligibleChannel = "fabric_eligible"

// EligibleSubscription wakes a worker when work becomes eligible on one
// of its lanes. Create it with SubscribeEligible.
type EligibleSubscription struct {
	// C receives a value when work became eligible on one of the lanes
	// (and after a reconnect, when notifications may have been missed).
	// It holds one pending wake: many notifications before a receive
	// fold into one.
	C <-chan struct{}

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

// SubscribeEligible LISTENs on EligibleChannel over a dedicated
// connection and signals C for notifications naming one of lanes. It
// returns once LISTEN is registered; a lost connection is redialled every
// 200 ms, with a wake after each redial.
func (c *Client) SubscribeEligible(ctx context.Context, lanes []string) (*EligibleSubscription, error) {
	conn, err := c.dialListen(ctx, EligibleChannel)
	if err != nil {
		return nil, fmt.Errorf("subscribe eligible: %w", err)
	}
	wake := make(chan struct{}, 1)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &EligibleSubscription{C: wake, cancel: cancel, done: make(chan struct{})}
	lanes = slices.Clone(lanes)
	go func() {
		defer close(s.done)
		c.eligibleLoop(sctx, conn, lanes, wake)
	}()
	return s, nil
}

// dialListen opens a dedicated connection (LISTEN needs a session of its
// own) listening on channel.
func (c *Client) dialListen(ctx context.Context, channel string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("listen %s: %w", channel, err)
	}
	return conn, nil
}

func (c *Client) eligibleLoop(ctx context.Context, conn *pgx.Conn, lanes []string, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
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
		if slices.Contains(lanes, n.Payload) {
			signal()
		}
	}
}
