package sdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Failure categories sent with ff_fail_execution.
const (
	CategoryTransient = "transient"
	CategoryPermanent = "permanent"
)

// maxReasonBytes bounds the failure reason stored from a Go error.
const maxReasonBytes = 1024

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// FailResult says what a failure led to.
type FailResult struct {
	// RetryScheduled reports a retry at RetryAt (the same execution,
	// a new attempt); otherwise the execution failed terminally.
	RetryScheduled bool
	RetryAt        time.Time
}

// Fail ends the attempt with a failure (ff_fail_execution). With retry,
// the execution's stored retry policy decides between a delayed retry
// and a terminal failure; without it the failure is terminal.
func (l *Lease) Fail(ctx context.Context, reason, category string, retry bool) (*FailResult, error) {
	out := &FailResult{}
	err := l.finishCall(ctx, "fail", model.OutcomeFailed, func(ctx context.Context) error {
		p := &backend.FailExecutionParams{ExecutionID: l.ID, Fence: l.fence,
			Holder:        backend.Holder{LaneID: l.Lane, WorkerInstanceID: l.w.cfg.InstanceID},
			FailureReason: truncate(reason, maxReasonBytes), FailureCategory: category}
		if !retry {
			p.RetryPolicyJSON = `{"max_retries":0}`
		}
		res, err := l.w.drv.FailExecution(ctx, p)
		if err != nil {
			return err
		}
		out.RetryScheduled = res.RetryScheduled
		if res.RetryScheduled {
			out.RetryAt = time.UnixMilli(res.DelayUntil)
		}
		return nil
	})
	if err == nil && !out.RetryScheduled {
		l.cascade(ctx)
	}
	return out, err
}

// Delay releases the lease and parks the execution until at
// (ff_delay_execution); the same attempt continues when a worker claims
// it after the delayed promoter made it eligible again.
func (l *Lease) Delay(ctx context.Context, at time.Time) error {
	return l.finishCall(ctx, "delay", "", func(ctx context.Context) error {
		return l.w.drv.DelayExecution(ctx, &backend.DelayExecutionParams{ExecutionID: l.ID, Fence: l.fence,
			Holder: backend.Holder{LaneID: l.Lane, WorkerInstanceID: l.w.cfg.InstanceID}, DelayUntil: at.UnixMilli()})
	})
}

// Cancel cancels the execution as its lease holder (ff_cancel_execution,
// source "worker", on Postgres the same end under the lease's fence).
func (l *Lease) Cancel(ctx context.Context, reason string) error {
	err := l.finishCall(ctx, "cancel", model.OutcomeCancelled, func(ctx context.Context) error {
		return l.w.drv.CancelLeasedExecution(ctx, &backend.CancelLeasedExecutionParams{ExecutionID: l.ID, Fence: l.fence,
			Holder: backend.Holder{LaneID: l.Lane, WorkerInstanceID: l.w.cfg.InstanceID}, Reason: reason})
	})
	if err == nil {
		l.cascade(ctx)
	}
	return err
}

// handBack releases a lease the worker will not finish: the execution is
// delayed to now, so it keeps its attempt and becomes claimable as soon
// as the delayed promoter (or a worker with PromoteDelayed) sees it.
func (l *Lease) handBack(ctx context.Context) error {
	err := l.Delay(ctx, l.w.cfg.Clock())
	if err == nil {
		l.w.stats.handedBack.Add(1)
	}
	if errors.Is(err, ErrLeaseFinished) || errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}

func (w *Worker) delay(ctx context.Context, l *Lease, at time.Time) error {
	err := l.Delay(ctx, at)
	if err == nil {
		w.stats.delayed.Add(1)
	}
	return err
}

func (w *Worker) fail(ctx context.Context, l *Lease, cause error, retry bool) error {
	cat := CategoryTransient
	if !retry {
		cat = CategoryPermanent
	}
	res, err := l.Fail(ctx, cause.Error(), cat, retry)
	switch {
	case err != nil:
	case res.RetryScheduled:
		w.stats.retried.Add(1)
	default:
		w.stats.failed.Add(1)
	}
	return err
}

// CancelExecution cancels an execution as an operator
// (ff_cancel_execution, source operator_override): any non-terminal
// phase, lease or not. Cancelling a terminal execution returns an error
// matching valkey.CodeExecutionNotActive (postgres.CodeExecutionNotActive
// on Postgres, where the execution's flow learns of it by its 'cancelled'
// completion event).
func (c *Client) CancelExecution(ctx context.Context, id model.ExecutionID, reason string) error {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return invalid("id", "%v", err)
	}
	if err := c.drv.CancelExecution(ctx, &backend.CancelExecutionParams{ExecutionID: id, Reason: reason}); err != nil {
		return fmt.Errorf("sdk: %w", err)
	}
	return nil
}
