package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/fabric-host/fabric/backend"
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
// must be on one of the worker's lanes. Its lane is read, then the
// worker's claim session claims it (backend.Claimer.ClaimExecution: on
// Valkey one fabric_claim_execution, and an execution needing a
// capability the worker lacks is parked for a capable worker; on
// Postgres one transaction, the row locked).
func (w *Worker) ClaimExecution(ctx context.Context, id model.ExecutionID) (*Lease, error) {
	if w.isClosed() {
		return nil, ErrWorkerClosed
	}
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, invalid("id", "%v", err)
	}
	st, err := w.drv.ExecutionState(ctx, id)
	if errors.Is(err, backend.ErrNotFound) || (err == nil && st.LaneID == "") {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	if !w.servesLane(st.LaneID) {
		return nil, invalid("id", "%s is on lane %q, which this worker does not serve", id, st.LaneID)
	}
	cr, err := w.claimer.ClaimExecution(ctx, id, st.LaneID)
	switch {
	case errors.Is(err, backend.ErrNotFound):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case errors.Is(err, backend.ErrNotClaimable), errors.Is(err, backend.ErrCapabilityMismatch):
		return nil, fmt.Errorf("%w: %s (%w)", ErrNotClaimable, id, err)
	case err != nil:
		return nil, fmt.Errorf("sdk: %w", err)
	case cr == nil:
		return nil, fmt.Errorf("%w: %s (%s)", ErrNotClaimable, id, st.LifecyclePhase)
	}
	return w.newLease(cr), nil
}
