package sdk

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/model"
)

// CreateExecutionTx is CreateExecution inside the caller's own database
// transaction, River's InsertTx: tx is the pgx.Tx
// (github.com/jackc/pgx/v5) of the client's Postgres database, in which
// the caller writes its own rows. The execution exists only if tx
// commits — before, it is neither visible nor claimable; after a
// rollback nothing of it remains — and idle workers are notified at the
// commit. Nothing is sent outside tx.
//
// Valkey has no transaction a create can join: it answers an error
// wrapping backend.ErrUnsupported. There, create after the commit with an
// idempotency key derived from the committed record
// (WithIdempotencyKey), so that a retry after a crash between the two
// creates once.
func (c *Client) CreateExecutionTx(ctx context.Context, tx any, spec ExecutionSpec) (model.ExecutionID, error) {
	if err := spec.validate(); err != nil {
		return "", err
	}
	p, err := c.createParams(ctx, &spec)
	if err != nil {
		return "", err
	}
	res, err := c.drv.CreateExecutionTx(ctx, tx, p)
	if err != nil {
		return "", fmt.Errorf("sdk: %w", err)
	}
	return res.ExecutionID, nil
}

// EnqueueTx is Enqueue inside the caller's transaction tx: see
// CreateExecutionTx.
func (c *Client) EnqueueTx(ctx context.Context, tx any, kind string, payload []byte, opts ...EnqueueOption) (model.ExecutionID, error) {
	spec, err := BuildSpec(kind, payload, opts...)
	if err != nil {
		return "", err
	}
	return c.CreateExecutionTx(ctx, tx, spec)
}
