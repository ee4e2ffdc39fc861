package postgres

import (
	"context"
	"errors"

	"github.com/fabric-host/fabric/backend"
)

// ClaimNextN is Driver.ClaimNext for up to n executions (n < 1 counts as
// 1), claimed in one statement when the search covers one partition
// (ClaimForWorkerN): a worker with several free slots fills them in one
// round trip. Nothing to claim is (nil, nil).
func (d *Driver) ClaimNextN(ctx context.Context, p *backend.ClaimNextParams, n int) ([]*backend.ClaimResult, error) {
	rs, err := d.c.ClaimForWorkerN(ctx, p, n)
	if errors.Is(err, CodeNoEligibleExecution) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err, false)
	}
	out := make([]*backend.ClaimResult, len(rs))
	for i, r := range rs {
		out[i] = claimOut(r)
	}
	return out, nil
}
