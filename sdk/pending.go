package sdk

import (
	"context"
)

// claimResumed claims an execution resumed from suspension. The
// suspension family (ff_claim_resumed_execution) is not merged into this
// branch yet, so the candidate is skipped.
func (w *Worker) claimResumed(ctx context.Context, c candidate, ji *jobInfo) (*Lease, error) {
	_, _ = ctx, ji
	w.log.Debug("resumed execution skipped: claim of resumed work not available yet", "execution_id", c.id)
	return nil, nil
}
