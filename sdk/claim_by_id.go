package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// ErrNotClaimable is returned (wrapped) by ClaimExecution when the
// execution exists but cannot be claimed by this worker now: not
// runnable and eligible, another worker got it, or it waits for a
// capability this worker lacks.
var ErrNotClaimable = errors.New("sdk: execution not claimable")

// ClaimExecution claims one given execution rather than the next one a
// scan finds: for a dispatcher that routes work itself, or to take a
// claim grant a scheduler issued to this worker (the grant is honoured:
// ff_claim_execution checks it belongs to this worker id). The execution
// must be on one of the worker's lanes. On Postgres it is
// backend.Driver.ClaimExecution (one transaction, the row locked).
func (w *Worker) ClaimExecution(ctx context.Context, id model.ExecutionID) (*Lease, error) {
	if w.isClosed() {
		return nil, ErrWorkerClosed
	}
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, invalid("id", "%v", err)
	}
	if w.pg != nil {
		return w.claimByIDDriver(ctx, id)
	}
	ji, err := w.readJob(ctx, id)
	if err != nil {
		return nil, err
	}
	if ji.lane == "" {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if !w.servesLane(ji.lane) {
		return nil, invalid("id", "%s is on lane %q, which this worker does not serve", id, ji.lane)
	}
	l, err := w.tryClaim(ctx, candidate{id: id, lane: ji.lane})
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: %s (%s)", ErrNotClaimable, id, ji.phase)
	}
	return l, nil
}

// claimByIDDriver is ClaimExecution through backend.Driver (Postgres):
// the execution's lane is read and checked, then Driver.ClaimExecution
// claims it.
func (w *Worker) claimByIDDriver(ctx context.Context, id model.ExecutionID) (*Lease, error) {
	st, err := w.drv.ExecutionState(ctx, id)
	if errors.Is(err, backend.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	if !w.servesLane(st.LaneID) {
		return nil, invalid("id", "%s is on lane %q, which this worker does not serve", id, st.LaneID)
	}
	cr, err := w.drv.ClaimExecution(ctx, &backend.ClaimExecutionParams{ExecutionID: id, WorkerID: w.cfg.WorkerID,
		WorkerInstanceID: w.cfg.InstanceID, Capabilities: w.caps, LeaseTTLMs: w.cfg.LeaseTTL.Milliseconds()})
	switch {
	case errors.Is(err, backend.ErrNotFound):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case errors.Is(err, backend.ErrNotClaimable), errors.Is(err, backend.ErrCapabilityMismatch):
		return nil, fmt.Errorf("%w: %s (%w)", ErrNotClaimable, id, err)
	case err != nil:
		return nil, fmt.Errorf("sdk: %w", err)
	}
	ji := &jobInfo{kind: cr.Kind, namespace: cr.Namespace, lane: cr.LaneID, flow: cr.FlowID, payload: string(cr.Payload)}
	return w.newLease(cr.ExecutionID, cr.LaneID, ji, &valkey.ClaimResult{LeaseID: cr.Fence.LeaseID,
		LeaseEpoch: cr.Fence.LeaseEpoch, ExpiresAt: cr.ExpiresAt, AttemptID: cr.Fence.AttemptID,
		AttemptIndex: cr.Fence.AttemptIndex, AttemptType: cr.AttemptType}), nil
}
