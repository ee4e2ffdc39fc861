package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// demoConfig sizes the demo workload.
type demoConfig struct {
	// Executions is how many executions the demo creates.
	Executions int
	// DelayedEvery makes every n-th execution delayed (0: none).
	DelayedEvery int
	// Delay is how far in the future delayed executions are due.
	Delay time.Duration
	// Lanes spreads executions over lanes (and so over partitions).
	Lanes []string
	// PromoteInline makes the demo promote due delayed executions itself,
	// for runs without the delayed_promoter plugin.
	PromoteInline bool
	// Timeout bounds the whole run.
	Timeout time.Duration
}

// demoSummary is what the demo did.
type demoSummary struct {
	Created, Delayed, Claimed, Completed, Promoted int
	Elapsed                                        time.Duration
}

func (s demoSummary) String() string {
	return fmt.Sprintf("executions: %d created (%d delayed), %d claimed, %d completed, %d promoted inline, in %s",
		s.Created, s.Delayed, s.Claimed, s.Completed, s.Promoted, s.Elapsed.Round(time.Millisecond))
}

// runDemo creates executions, then claims and completes every one of them
// the way a worker does (grant → claim → complete), waiting for delayed
// ones to become eligible. It prints one line per phase to out.
func runDemo(ctx context.Context, c *valkey.Client, cfg demoConfig, out io.Writer, log *slog.Logger) (demoSummary, error) {
	start := time.Now()
	var sum demoSummary
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	parts := c.Partitions()
	now, err := c.ServerTime(ctx)
	if err != nil {
		return sum, err
	}
	pending := map[model.ExecutionID]string{} // id → lane
	for i := 0; i < cfg.Executions; i++ {
		lane := cfg.Lanes[i%len(cfg.Lanes)]
		id := parts.NewSoloExecutionID(lane)
		p := &valkey.CreateExecutionParams{
			ExecutionID: id, Namespace: "demo", LaneID: lane, ExecutionKind: "demo.echo",
			Priority: rand.IntN(10), CreatorIdentity: "fabric-demo",
			Payload: fmt.Sprintf(`{"n":%d}`, i),
		}
		if cfg.DelayedEvery > 0 && i%cfg.DelayedEvery == 0 {
			p.DelayUntil = now + cfg.Delay.Milliseconds()
			sum.Delayed++
		}
		if _, err := c.CreateExecution(ctx, p); err != nil {
			return sum, err
		}
		pending[id] = lane
		sum.Created++
	}
	fmt.Fprintf(out, "demo: created %d executions (%d delayed by %s) on lanes %v\n", sum.Created, sum.Delayed, cfg.Delay, cfg.Lanes)

	worker := "demo-worker"
	instance := "demo-worker-" + model.NewUUID().String()[:8]
	for len(pending) > 0 {
		progressed := false
		for _, lane := range cfg.Lanes {
			p := parts.SoloPartition(lane)
			ids, err := c.Raw().Do(ctx, c.Raw().B().Zrangebyscore().Key(model.KeysOn(p).LaneEligible(lane)).
				Min("-inf").Max("+inf").Limit(0, 16).Build()).AsStrSlice()
			if err != nil {
				return sum, fmt.Errorf("demo: read eligible: %w", err)
			}
			for _, s := range ids {
				id := model.ExecutionID(s)
				if err := c.IssueClaimGrant(ctx, &valkey.IssueClaimGrantParams{ExecutionID: id, WorkerID: worker,
					WorkerInstanceID: instance, Lane: lane, GrantTTLMs: 5000}); err != nil {
					if valkey.Retryable(valkey.CodeOf(err)) {
						continue
					}
					return sum, err
				}
				lease, err := c.ClaimExecution(ctx, &valkey.ClaimExecutionParams{ExecutionID: id, WorkerID: worker,
					WorkerInstanceID: instance, LaneID: lane, LeaseTTLMs: 30000})
				if err != nil {
					return sum, err
				}
				sum.Claimed++
				if err := c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: id,
					Fence: lease.Fence(), Result: `{"ok":true}`}); err != nil {
					return sum, err
				}
				sum.Completed++
				delete(pending, id)
				progressed = true
			}
		}
		if progressed {
			continue
		}
		if cfg.PromoteInline {
			n, err := promoteDue(ctx, c, cfg.Lanes)
			if err != nil {
				return sum, err
			}
			sum.Promoted += n
			if n > 0 {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return sum, fmt.Errorf("demo: %d executions still pending: %w", len(pending), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	sum.Elapsed = time.Since(start)
	log.Debug("demo finished", "created", sum.Created, "completed", sum.Completed)
	return sum, nil
}

// promoteDue promotes due delayed executions of the demo lanes, standing in
// for the delayed_promoter plugin when the host runs without it.
func promoteDue(ctx context.Context, c *valkey.Client, lanes []string) (int, error) {
	now, err := c.ServerTime(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, lane := range lanes {
		p := c.Partitions().SoloPartition(lane)
		ids, err := c.Raw().Do(ctx, c.Raw().B().Zrangebyscore().Key(model.KeysOn(p).LaneDelayed(lane)).
			Min("-inf").Max(fmt.Sprint(now)).Limit(0, 50).Build()).AsStrSlice()
		if err != nil {
			return n, fmt.Errorf("demo: read delayed: %w", err)
		}
		for _, s := range ids {
			st, err := c.PromoteDelayed(ctx, &valkey.PromoteDelayedParams{ExecutionID: model.ExecutionID(s), Partition: &p, Lane: lane, NowMs: now})
			if err != nil && !errors.Is(err, context.Canceled) {
				return n, err
			}
			if st == valkey.PromotePromoted {
				n++
			}
		}
	}
	return n, nil
}
