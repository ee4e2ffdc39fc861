package sdk

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// MaxEnqueueBatch bounds the specs of one EnqueueMany call.
const MaxEnqueueBatch = 10_000

// EnqueueMany creates several executions in one pipelined round trip (one
// ff_create_execution per spec, sent together), for producers that have a
// batch at hand. Build each spec with BuildSpec to use enqueue options.
//
// Every spec is validated first: if any is invalid, the error (wrapping
// ErrInvalidInput, naming the spec's index) is returned and nothing is
// sent. Otherwise ids[i] is spec i's execution (the first execution's id
// for a reused idempotency key), or "" when its call failed; the failures
// are joined in the error, each naming its index.
func (c *Client) EnqueueMany(ctx context.Context, specs ...ExecutionSpec) ([]model.ExecutionID, error) {
	if len(specs) > MaxEnqueueBatch {
		return nil, invalid("specs", "%d exceed %d", len(specs), MaxEnqueueBatch)
	}
	params := make([]*backend.CreateExecutionParams, len(specs))
	for i := range specs {
		if err := specs[i].validate(); err != nil {
			return nil, fmt.Errorf("spec %d: %w", i, err)
		}
	}
	for i := range specs {
		p, err := c.createParams(ctx, &specs[i])
		if err != nil {
			return nil, fmt.Errorf("spec %d: %w", i, err)
		}
		params[i] = p
	}
	// One pipelined round trip on Valkey (after the lanes' registration),
	// one transaction per spec on Postgres (backend.Driver.CreateExecutions).
	res, err := c.drv.CreateExecutions(ctx, params)
	ids := make([]model.ExecutionID, len(specs))
	for i, r := range res {
		if r != nil {
			ids[i] = r.ExecutionID
		}
	}
	if err != nil {
		return ids, fmt.Errorf("sdk: create executions: %w", err)
	}
	return ids, nil
}
