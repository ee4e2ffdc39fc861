package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model/edgegroup"
)

// WaitForChildrenParams are the inputs of WaitForChildren.
type WaitForChildrenParams = backend.WaitForChildrenParams

// WaitForChildren makes the fenced execution wait for children of its
// flow (upstream's wait_children), in one transaction:
//
//	ff_edge per child (child → execution; success_only, all_required)
//	ff_edge_group of the execution: all_of; running_count the children not yet
//	  counted, success / fail / skip counts of those already counted (as
//	  AddFlowMember counts parents); a group left by earlier parents is reset
//	ff_attempt: lease NULL, outcome waiting_children
//	ff_exec_core: runnable / unowned / blocked_by_dependencies / waiting_children /
//	  attempt_interrupted, blocking_reason waiting_for_children; then eligible when
//	  the children already succeeded, skipped (with its completion event) when one
//	  already failed
//	ff_flow_core: graph_revision + 1, edge_count
//	ff_lease_event: revoked
//
// The dependency dispatcher (pg_dependency_reconciler) counts the
// children that end later and releases the execution; its next claim
// continues the same attempt ("resumed"). A stale fence writes nothing
// (CodeStaleLease, CodeLeaseExpired, CodeExecutionNotActive); so do
// children that are not members of the execution's flow, and an
// execution whose earlier parents are still running (CodeInvalidInput).
func (c *Client) WaitForChildren(ctx context.Context, p *WaitForChildrenParams) (*backend.WaitForChildrenResult, error) {
	if err := p.ValidateChildren(); err != nil {
		return nil, fmt.Errorf("%w: %w", CodeInvalidInput, err)
	}
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("wait for children of %s: %w", p.ExecutionID, err)
	}
	children := make([][16]byte, len(p.Children))
	for i, ch := range p.Children {
		ck, _ := splitExecID(ch) // checked by ValidateChildren
		children[i] = [16]byte(ck.uuid)
	}
	edgeJSON, _ := json.Marshal(map[string]any{"dependency_kind": "success_only", "satisfaction_condition": "all_required",
		"edge_state": "applied", "created_at_ms": p.NowMs, "created_by": "sdk", "staged_at_ms": p.NowMs, "applied_at_ms": p.NowMs})
	flow, job := [16]byte(p.FlowID), [16]byte(k.uuid)
	res := &backend.WaitForChildrenResult{}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		if _, err := c.checkFence(ctx, tx, k, p.Fence, now); err != nil {
			return err
		}
		var members int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM ff_exec_core WHERE partition_key = $1 AND flow_id = $2 AND execution_id = ANY($3)`,
			k.part, flow, children).Scan(&members); err != nil {
			return err
		}
		var inFlow bool
		if err := tx.QueryRow(ctx, `SELECT flow_id IS NOT DISTINCT FROM $3 FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`,
			k.part, job, flow).Scan(&inFlow); err != nil {
			return err
		}
		if !inFlow || members != len(children) {
			return fmt.Errorf("%w: the execution and its children must be members of flow %s", CodeInvalidInput, p.FlowID)
		}
		cnt, err := countParents(ctx, tx, k.part, children)
		if err != nil {
			return err
		}
		var running int64
		err = tx.QueryRow(ctx, `SELECT running_count FROM ff_edge_group WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3
   FOR UPDATE`, k.part, flow, job).Scan(&running)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			_, err = tx.Exec(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, policy, k_target,
  success_count, fail_count, skip_count, running_count) VALUES ($1, $2, $3, '{"kind":"all_of"}'::jsonb, 0, $4, $5, $6, $7)`,
				k.part, flow, job, cnt.Success, cnt.Fail, cnt.Skip, cnt.Running)
		case err != nil:
		case running > 0:
			err = fmt.Errorf("%w: %s still waits for %d parents", CodeInvalidInput, p.ExecutionID, running)
		default:
			_, err = tx.Exec(ctx, `UPDATE ff_edge_group SET policy = '{"kind":"all_of"}'::jsonb, k_target = 0,
       success_count = $4, fail_count = $5, skip_count = $6, running_count = $7,
       cancel_siblings_pending_flag = false, cancel_siblings_pending_members = '{}'
 WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`, k.part, flow, job, cnt.Success, cnt.Fail, cnt.Skip, cnt.Running)
		}
		if err != nil {
			return err
		}
		for _, up := range children {
			if _, err := tx.Exec(ctx, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy)
VALUES ($1, $2, gen_random_uuid(), $3, $4, $5::jsonb)`, k.part, flow, up, job, string(edgeJSON)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt
   SET worker_id = NULL, worker_instance_id = NULL, lease_expires_at_ms = NULL, outcome = 'waiting_children'
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, job, p.Fence.AttemptIndex); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core
   SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'blocked_by_dependencies',
       public_state = 'waiting_children', attempt_state = 'attempt_interrupted', blocking_reason = 'waiting_for_children',
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2`, k.part, job, now); err != nil {
			return err
		}
		pol := edgegroup.DecodePolicy(edgegroup.KindAllOf, 0, "")
		state, err := c.settleChild(ctx, tx, k, p.FlowID, edgegroup.Evaluate(pol, cnt), pol, now)
		if err != nil {
			return err
		}
		res.Eligible = state == MemberEligible
		if _, err := tx.Exec(ctx, `UPDATE ff_flow_core SET graph_revision = graph_revision + 1,
       raw_fields = raw_fields || jsonb_build_object(
         'edge_count', COALESCE((raw_fields->>'edge_count')::bigint, 0) + $3::bigint,
         'last_mutation_at_ms', $4::bigint)
 WHERE partition_key = $1 AND flow_id = $2`, k.part, flow, len(children), now); err != nil {
			return err
		}
		return emitLeaseEvent(ctx, tx, k, LeaseEventRevoked, "waiting_children", now)
	})
	if err != nil {
		return nil, fmt.Errorf("wait for children of %s: %w", p.ExecutionID, err)
	}
	return res, nil
}

// WaitForChildren implements backend.ChildrenDriver.
func (d *Driver) WaitForChildren(ctx context.Context, p *backend.WaitForChildrenParams) (*backend.WaitForChildrenResult, error) {
	r, err := d.c.WaitForChildren(ctx, p)
	return r, mapControlErr(err, true)
}
