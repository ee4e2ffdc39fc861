package sdk

import (
	"context"
	"errors"
	"fmt"

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
// must be on one of the worker's lanes.
func (w *Worker) ClaimExecution(ctx context.Context, id model.ExecutionID) (*Lease, error) {
	if w.isClosed() {
		return nil, ErrWorkerClosed
	}
	if w.pg != nil {
		return nil, errNotOnPostgres("Worker.ClaimExecution")
	}
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, invalid("id", "%v", err)
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
