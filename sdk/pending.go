package sdk

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend/valkey"
)

// claimResumed claims an execution whose attempt was interrupted
// (resumed from suspension, a worker delay or waiting children) with the
// grant the failed ff_claim_execution left in place
// (ff_claim_resumed_execution): the same attempt continues under a new
// lease.
func (w *Worker) claimResumed(ctx context.Context, c candidate, ji *jobInfo) (*Lease, error) {
	r, err := w.vc.ClaimResumedExecution(ctx, &valkey.ClaimResumedParams{ExecutionID: c.id,
		WorkerID: w.cfg.WorkerID, WorkerInstanceID: w.cfg.InstanceID, Lane: c.lane,
		LeaseID: newID(), LeaseTTLMs: w.cfg.LeaseTTL.Milliseconds()})
	if err != nil {
		if skippable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return w.newLease(c.id, c.lane, ji, &valkey.ClaimResult{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch,
		ExpiresAt: r.ExpiresAt, AttemptID: r.AttemptID, AttemptIndex: r.AttemptIndex, AttemptType: "resumed"}), nil
}
