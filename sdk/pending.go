package sdk

import (
	"context"
	"time"
)

// claimResumed claims an execution resumed from suspension. Pending the
// suspension family's wrappers, it skips the candidate.
func (w *Worker) claimResumed(ctx context.Context, c candidate, ji *jobInfo) (*Lease, error) {
	_ = ctx
	w.log.Debug("resumed execution skipped: claim of resumed work not available yet", "execution_id", c.id)
	return nil, nil
}

// tryReclaim takes over an expired lease. Pending ff_reclaim_execution,
// it skips the candidate.
func (w *Worker) tryReclaim(ctx context.Context, c candidate) (*Lease, error) {
	_ = ctx
	return nil, nil
}

// handBack releases a lease the worker will not finish.
func (l *Lease) handBack(ctx context.Context) error {
	_ = ctx
	if l.begin() == nil {
		l.end()
	}
	return nil
}

func (w *Worker) delay(ctx context.Context, l *Lease, at time.Time) error {
	_ = at
	return l.handBack(ctx)
}

func (w *Worker) fail(ctx context.Context, l *Lease, cause error, retry bool) error {
	_, _ = cause, retry
	return l.handBack(ctx)
}
