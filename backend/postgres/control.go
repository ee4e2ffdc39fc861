package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Logical errors of the control operations (cancel as holder, flow
// cancel, suspension, signals, streams).
const (
	CodeFlowNotFound          ErrorCode = "flow_not_found"
	CodeFlowAlreadyTerminal   ErrorCode = "flow_already_terminal"
	CodeInvalidToken          ErrorCode = "invalid_token"
	CodeWaitpointNotFound     ErrorCode = "waitpoint_not_found"
	CodeExecutionNotSuspended ErrorCode = "execution_not_suspended"
)

// mapControlErr is mapErr with the control operations' codes.
func mapControlErr(err error, fenced bool) error {
	var s error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, CodeFlowNotFound):
		s = backend.ErrFlowNotFound
	case errors.Is(err, CodeFlowAlreadyTerminal):
		s = backend.ErrFlowTerminal
	case errors.Is(err, CodeInvalidToken):
		s = backend.ErrInvalidToken
	case errors.Is(err, CodeWaitpointNotFound):
		s = backend.ErrWaitpointNotFound
	case errors.Is(err, CodeExecutionNotSuspended):
		s = backend.ErrNotSuspended
	default:
		return mapErr(err, fenced)
	}
	return fmt.Errorf("%w: %w", s, err)
}

// inTxRetry is inTx retried (up to 3 transactions in all) when one ends
// in a deadlock or serialization failure: the operations that lock rows
// in an order a reconciler reverses (DeliverSignal: execution, waitpoint,
// suspension; pg_suspension_timeout: suspension, execution) let Postgres
// pick the victim and run again, as upstream's run_serializable does.
func (c *Client) inTxRetry(ctx context.Context, fn func(tx pgx.Tx) error) error {
	var err error
	for range 3 {
		if err = c.inTx(ctx, fn); !isSerialization(err) {
			return err
		}
	}
	return err
}

// CancelLeasedExecutionParams are the inputs of CancelLeasedExecution
// (Holder is not used: Postgres addresses rows by execution id).
type CancelLeasedExecutionParams = backend.CancelLeasedExecutionParams

// CancelLeasedExecution cancels the fenced execution as its lease holder
// (cancelled_by "worker"): the fence is checked as complete checks it,
// then the execution ends as CancelExecution ends it. A fence that no
// longer holds the lease is CodeStaleLease, CodeLeaseExpired or
// CodeExecutionNotActive, and nothing is written.
func (c *Client) CancelLeasedExecution(ctx context.Context, p *CancelLeasedExecutionParams) error {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return fmt.Errorf("cancel execution %s: %w", p.ExecutionID, err)
	}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		if _, err := c.checkFence(ctx, tx, k, p.Fence, now); err != nil {
			return err
		}
		return cancelLocked(ctx, tx, k, model.PhaseActive, p.Fence.AttemptIndex, p.Reason, "worker", now)
	})
	if err != nil {
		return fmt.Errorf("cancel execution %s: %w", p.ExecutionID, err)
	}
	return nil
}

// CancelFlowParams are the inputs of CancelFlow.
type CancelFlowParams = backend.CancelFlowParams

// CancelFlow cancels a flow and, in the same transaction, every member
// that has not ended, as FlowFabric's server does synchronously with
// cancellation policy cancel_all:
//
//	ff_flow_core: public_flow_state cancelled, terminal_at_ms, raw_fields
//	  cancellation_policy cancel_all, cancel_reason, last_mutation_at_ms
//	each member not terminal: ended as CancelExecution ends it (cancelled_by
//	  operator_override, a 'cancelled' completion event, its waitpoints and
//	  suspension removed)
//
// It returns the members it cancelled, oldest first. A missing flow is
// CodeFlowNotFound, a cancelled, completed or failed one
// CodeFlowAlreadyTerminal. Upstream's Postgres cancel_flow matches
// members by lifecycle values its own writers never produce and
// re-cancels ended members (spec postgres.md §9 item 4); fabric cancels
// exactly the members that have not ended.
func (c *Client) CancelFlow(ctx context.Context, p *CancelFlowParams) ([]model.ExecutionID, error) {
	if p.FlowID.IsZero() {
		return nil, fmt.Errorf("cancel flow: %w: a flow id is required", CodeInvalidInput)
	}
	fp := int16(c.parts.FlowPartition(p.FlowID).Index)
	flow := [16]byte(p.FlowID)
	var out []model.ExecutionID
	err := c.inTxRetry(ctx, func(tx pgx.Tx) error {
		out = nil
		now := c.nowMs()
		var state string
		err := tx.QueryRow(ctx, `SELECT public_flow_state FROM ff_flow_core WHERE partition_key = $1 AND flow_id = $2 FOR UPDATE`,
			fp, flow).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeFlowNotFound
		}
		if err != nil {
			return err
		}
		switch state {
		case "cancelled", "completed", "failed":
			return fmt.Errorf("%w: %s", CodeFlowAlreadyTerminal, state)
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_flow_core
   SET public_flow_state = 'cancelled', terminal_at_ms = COALESCE(terminal_at_ms, $3),
       raw_fields = raw_fields || jsonb_build_object('cancellation_policy', 'cancel_all', 'cancel_reason', $4::text,
           'last_mutation_at_ms', $3::bigint)
 WHERE partition_key = $1 AND flow_id = $2`, fp, flow, now, p.Reason); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT execution_id, lifecycle_phase, attempt_index FROM ff_exec_core
 WHERE partition_key = $1 AND flow_id = $2 AND lifecycle_phase <> 'terminal'
 ORDER BY created_at_ms, execution_id FOR UPDATE`, fp, flow)
		if err != nil {
			return err
		}
		type member struct {
			k     execKey
			phase string
			idx   int
		}
		ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (member, error) {
			var m member
			var u [16]byte
			err := r.Scan(&u, &m.phase, &m.idx)
			m.k = execKey{part: fp, uuid: u}
			return m, err
		})
		if err != nil {
			return err
		}
		for _, m := range ms {
			if err := cancelLocked(ctx, tx, m.k, m.phase, m.idx, p.Reason, "operator_override", now); err != nil {
				return err
			}
			out = append(out, m.k.execID())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cancel flow %s: %w", p.FlowID, err)
	}
	return out, nil
}

// CancelLeasedExecution implements backend.ControlDriver.
func (d *Driver) CancelLeasedExecution(ctx context.Context, p *backend.CancelLeasedExecutionParams) error {
	return mapControlErr(d.c.CancelLeasedExecution(ctx, p), true)
}

// CancelFlow implements backend.ControlDriver.
func (d *Driver) CancelFlow(ctx context.Context, p *backend.CancelFlowParams) (*backend.CancelFlowResult, error) {
	ms, err := d.c.CancelFlow(ctx, p)
	if err != nil {
		return nil, mapControlErr(err, false)
	}
	return &backend.CancelFlowResult{Members: ms}, nil
}
