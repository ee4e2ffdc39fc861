package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Executions lists one page of executions, filtered by lane, state and
// flow — the listing the operator console shows, through the same
// contract (backend.Inspector) on both backends. p.Cursor continues from
// the previous page's NextCursor.
func (c *Client) Executions(ctx context.Context, p backend.ListExecutionsParams) (*backend.ExecutionPage, error) {
	page, err := c.drv.ListExecutions(ctx, &p)
	if err != nil {
		return nil, inspectErr("list executions", err)
	}
	return page, nil
}

// Inspect reads an execution's whole history as the console shows it:
// its record, attempts with their own outcomes and errors, lease events
// with their release reasons and workers, waitpoints, tags, payload and
// result previews, and its place in a flow.
func (c *Client) Inspect(ctx context.Context, id model.ExecutionID) (*backend.ExecutionDetail, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, invalid("id", "%v", err)
	}
	d, err := c.drv.InspectExecution(ctx, id)
	if err != nil {
		return nil, inspectErr("inspect "+string(id), err)
	}
	return d, nil
}

// inspectErr maps the contract's errors onto the SDK's.
func inspectErr(what string, err error) error {
	switch {
	case errors.Is(err, backend.ErrNotFound):
		return fmt.Errorf("%w: %s: %w", ErrNotFound, what, err)
	case errors.Is(err, backend.ErrInvalidInput):
		return fmt.Errorf("%w: %s: %w", ErrInvalidInput, what, err)
	}
	return fmt.Errorf("sdk: %s: %w", what, err)
}
