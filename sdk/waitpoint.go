package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
)

// CreatePendingWaitpoint creates a waitpoint before the attempt suspends
// (backend.WaitpointDriver; ff_create_pending_waitpoint on Valkey), so its id and token can be handed out
// first (e.g. put in a callback URL) without losing a signal that arrives
// before the suspend: such signals are buffered and counted by
// Suspend(SuspendSpec{Pending: wp}). The waitpoint expires after ttl if
// the attempt never suspends on it. key "" means a random key.
func (l *Lease) CreatePendingWaitpoint(ctx context.Context, key string, ttl time.Duration) (*Waitpoint, error) {
	if ttl < time.Millisecond {
		return nil, invalid("waitpoint.ttl", "must be at least 1ms (got %s)", ttl)
	}
	if key == "" {
		key = "wpk:" + newID()
	}
	g, err := l.w.drv.CreatePendingWaitpoint(ctx, &backend.CreatePendingWaitpointParams{ExecutionID: l.ID,
		Fence: l.fence, WaitpointID: newID(), WaitpointKey: key, ExpiresAt: l.w.cfg.Clock().Add(ttl).UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return (*Waitpoint)(g), nil
}

// CreatePendingWaitpoint creates a pending waitpoint (see
// Lease.CreatePendingWaitpoint).
func (j *Job) CreatePendingWaitpoint(ctx context.Context, key string, ttl time.Duration) (*Waitpoint, error) {
	return j.lease.CreatePendingWaitpoint(ctx, key, ttl)
}
