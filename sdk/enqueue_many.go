package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/fabric-host/fabric/backend/valkey"
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
	params := make([]*valkey.CreateExecutionParams, len(specs))
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
	ids := make([]model.ExecutionID, len(specs))
	var errs []error
	if c.vc == nil {
		for i, p := range params {
			id, err := c.pgCreate(ctx, p, &specs[i])
			if err != nil {
				errs = append(errs, fmt.Errorf("spec %d: %w", i, err))
				continue
			}
			ids[i] = id
		}
		return ids, errors.Join(errs...)
	}
	for i := range specs {
		if err := c.registerLane(ctx, specs[i].Lane); err != nil {
			return nil, err
		}
	}
	calls := make([]valkey.Call, len(params))
	for i, p := range params {
		calls[i] = p.Call()
	}
	for i, r := range c.vc.FCallBatch(ctx, calls) {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("sdk: create execution %s (spec %d): %w", params[i].ExecutionID, i, r.Err))
			continue
		}
		ids[i] = model.ExecutionID(r.Reply.Field(0))
	}
	return ids, errors.Join(errs...)
}
