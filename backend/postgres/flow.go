package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/edgegroup"
	"github.com/fabric-host/fabric/model/pgsql"
)

// CreateFlowParams are the inputs of CreateFlow.
type CreateFlowParams = backend.CreateFlowParams

// CreateFlow creates an empty, open flow on its flow partition
// (ff_flow_core: graph_revision 0, raw_fields flow_kind, namespace,
// node_count 0, edge_count 0, last_mutation_at_ms); creating an existing
// flow again changes nothing.
func (c *Client) CreateFlow(ctx context.Context, p *CreateFlowParams) error {
	return c.createFlow(ctx, c.pool, p)
}

// createFlow is CreateFlow on db: in its own transaction on the pool, in
// a savepoint of a caller's transaction.
func (c *Client) createFlow(ctx context.Context, db createDB, p *CreateFlowParams) error {
	if p.FlowID.IsZero() {
		return fmt.Errorf("create flow: %w: a flow id is required", CodeInvalidInput)
	}
	pk := int16(c.parts.FlowPartition(p.FlowID).Index)
	raw, err := json.Marshal(map[string]any{"flow_kind": p.Kind, "namespace": p.Namespace, "node_count": 0, "edge_count": 0,
		"last_mutation_at_ms": p.NowMs})
	if err != nil {
		return fmt.Errorf("create flow %s: %w", p.FlowID, err)
	}
	err = notMigrated(pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ff_flow_core (partition_key, flow_id, graph_revision, public_flow_state, created_at_ms, raw_fields)
VALUES ($1, $2, 0, 'open', $3, $4::jsonb) ON CONFLICT DO NOTHING`, pk, [16]byte(p.FlowID), p.NowMs, string(raw))
		return err
	}))
	if err != nil {
		return fmt.Errorf("create flow %s: %w", p.FlowID, err)
	}
	return nil
}

// AddFlowMemberParams are the inputs of AddFlowMember.
type AddFlowMemberParams = backend.AddFlowMemberParams

// FlowMemberState is what AddFlowMember left the child as.
type FlowMemberState string

// AddFlowMember outcomes.
const (
	// MemberRoot: no parents; the child is left as it was created.
	MemberRoot FlowMemberState = "root"
	// MemberBlocked: waiting for its parents (blocked_by_dependencies).
	MemberBlocked FlowMemberState = "blocked"
	// MemberEligible: the parents that already finished satisfy it.
	MemberEligible FlowMemberState = "eligible"
	// MemberSkipped: the parents that already finished make it
	// impossible; it ended skipped with a 'skipped' completion event.
	MemberSkipped FlowMemberState = "skipped"
)

// AddFlowMember makes Child a member of the flow with edges from Parents
// and its edge group, all in one transaction, so the child is never
// claimable while an edge is missing:
//
//	ff_edge per parent (policy: edge_state applied, success_only, all_required)
//	ff_edge_group: the policy; running_count the parents not yet counted
//	  and success / fail / skip counts of those already counted (below)
//	child: blocked_by_dependencies / waiting_children, or eligible_now /
//	  waiting when already satisfied, or skipped (with its 'skipped'
//	  completion event) when already impossible
//	ff_flow_core: graph_revision + 1, node_count and edge_count updated
//
// A parent that already finished is counted here only when its
// completion event was dispatched (or it has none); otherwise the
// dependency dispatcher counts it when it dispatches that event after
// this commits. Parent rows (FOR SHARE) and their completion events (FOR
// UPDATE) are locked, so a parent finishing or a dispatcher claiming its
// event meanwhile waits for this transaction: each parent is counted once.
func (c *Client) AddFlowMember(ctx context.Context, p *AddFlowMemberParams) (FlowMemberState, error) {
	ck, err := splitExecID(p.Child)
	if err != nil {
		return "", fmt.Errorf("add flow member: %w", err)
	}
	fp := int16(c.parts.FlowPartition(p.FlowID).Index)
	if ck.part != fp {
		return "", fmt.Errorf("add flow member %s: %w: not on flow %s's partition", p.Child, CodeInvalidInput, p.FlowID)
	}
	parents := make([][16]byte, len(p.Parents))
	for i, a := range p.Parents {
		k, err := splitExecID(a)
		if err != nil || k.part != fp {
			return "", fmt.Errorf("add flow member %s: %w: parent %s is not on flow %s's partition", p.Child, CodeInvalidInput, a, p.FlowID)
		}
		parents[i] = [16]byte(k.uuid)
	}
	policy := map[string]any{"kind": edgegroup.KindAllOf}
	switch p.Kind {
	case "", edgegroup.KindAllOf:
	case edgegroup.KindAnyOf:
		policy = map[string]any{"kind": p.Kind, "on_satisfied": p.OnSatisfied}
	case edgegroup.KindQuorum:
		policy = map[string]any{"kind": p.Kind, "k": p.K, "on_satisfied": p.OnSatisfied}
	default:
		return "", fmt.Errorf("add flow member %s: %w: edge group kind %q", p.Child, CodeInvalidInput, p.Kind)
	}
	policyJSON, _ := json.Marshal(policy)
	edgeJSON, _ := json.Marshal(map[string]any{"dependency_kind": "success_only", "satisfaction_condition": "all_required",
		"edge_state": "applied", "created_at_ms": p.NowMs, "created_by": "sdk", "staged_at_ms": p.NowMs, "applied_at_ms": p.NowMs})
	state := MemberRoot
	flowID, childID, now := [16]byte(p.FlowID), [16]byte(ck.uuid), p.NowMs
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE ff_exec_core SET flow_id = $3 WHERE partition_key = $1 AND execution_id = $2`, fp, childID, flowID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return CodeExecutionNotFound
		}
		var cnt edgegroup.Counters
		if len(parents) > 0 {
			if cnt, err = countParents(ctx, tx, fp, parents); err != nil {
				return err
			}
			for _, up := range parents {
				if _, err := tx.Exec(ctx, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy)
VALUES ($1, $2, gen_random_uuid(), $3, $4, $5::jsonb)`, fp, flowID, up, childID, string(edgeJSON)); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, policy, k_target,
  success_count, fail_count, skip_count, running_count) VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9)`,
				fp, flowID, childID, string(policyJSON), p.K, cnt.Success, cnt.Fail, cnt.Skip, cnt.Running); err != nil {
				return err
			}
			pol := edgegroup.DecodePolicy(policy["kind"].(string), int64(p.K), p.OnSatisfied)
			if state, err = c.settleChild(ctx, tx, ck, p.FlowID, edgegroup.Evaluate(pol, cnt), pol, now); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `UPDATE ff_flow_core SET graph_revision = graph_revision + 1,
       raw_fields = raw_fields || jsonb_build_object(
         'node_count', COALESCE((raw_fields->>'node_count')::bigint, 0) + 1,
         'edge_count', COALESCE((raw_fields->>'edge_count')::bigint, 0) + $3::bigint,
         'last_mutation_at_ms', $4::bigint)
 WHERE partition_key = $1 AND flow_id = $2`, fp, flowID, len(parents), now)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("add flow member %s: %w", p.Child, err)
	}
	return state, nil
}

// countParents locks the parents (a parent finishing waits for this
// transaction's commit), then their undispatched completion events (a
// dispatcher claiming one waits, and then sees the new edges), and counts
// them as they are under those locks: a parent is counted here only when
// it ended and its event was dispatched (or it has none); otherwise it is
// running, and the dependency dispatcher counts it later.
func countParents(ctx context.Context, tx pgx.Tx, fp int16, parents [][16]byte) (edgegroup.Counters, error) {
	var cnt edgegroup.Counters
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ff_exec_core WHERE partition_key = $1 AND execution_id = ANY($2) FOR SHARE`,
		fp, parents); err != nil {
		return cnt, err
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ff_completion_event WHERE partition_key = $1 AND execution_id = ANY($2)
   AND dispatched_at_ms IS NULL FOR UPDATE`, fp, parents); err != nil {
		return cnt, err
	}
	rows, err := tx.Query(ctx, `SELECT c.lifecycle_phase IN ('terminal', 'cancelled'), c.public_state,
       EXISTS (SELECT 1 FROM ff_completion_event e WHERE e.partition_key = $1
                  AND e.execution_id = c.execution_id AND e.dispatched_at_ms IS NULL)
  FROM ff_exec_core c WHERE c.partition_key = $1 AND c.execution_id = ANY($2)`, fp, parents)
	if err != nil {
		return cnt, err
	}
	type parent struct {
		ended, undispatched bool
		public              string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (parent, error) {
		var x parent
		return x, r.Scan(&x.ended, &x.public, &x.undispatched)
	})
	if err != nil {
		return cnt, err
	}
	if len(got) != len(parents) {
		return cnt, fmt.Errorf("%w: a parent is missing", CodeExecutionNotFound)
	}
	for _, x := range got {
		switch {
		case !x.ended || x.undispatched:
			cnt.Running++
		case x.public == model.PublicCompleted:
			cnt.Success++
		case x.public == model.PublicSkipped:
			cnt.Skip++
		default:
			cnt.Fail++
		}
	}
	return cnt, nil
}

// settleChild puts a child with parents in the state its group's first
// decision says, in the statements the dependency dispatcher uses.
func (c *Client) settleChild(ctx context.Context, tx pgx.Tx, ck execKey, flow model.UUID, d edgegroup.Decision, pol edgegroup.Policy, now int64) (FlowMemberState, error) {
	// Out of the creation hold (delayed) into blocked by dependencies.
	if _, err := tx.Exec(ctx, `UPDATE ff_exec_core
   SET lifecycle_phase = 'runnable', eligibility_state = 'blocked_by_dependencies', public_state = 'waiting_children',
       blocking_reason = 'waiting_for_children', deadline_at_ms = NULL,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2 AND lifecycle_phase IN ('runnable', 'submitted')`,
		ck.part, [16]byte(ck.uuid), now); err != nil {
		return "", err
	}
	switch d {
	case edgegroup.Satisfied:
		if _, err := tx.Exec(ctx, pgsql.DependencyReleaseChild.SQL, ck.part, ck.id(), now); err != nil {
			return "", err
		}
		if pol.Kind != edgegroup.KindAllOf && pol.CancelRemaining {
			var members int
			err := tx.QueryRow(ctx, pgsql.EdgeGroupFlagSiblings.SQL, ck.part, flow.String(), ck.id(), model.UUID{}.String()).Scan(&members)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return "", err
			}
			if members > 0 {
				if _, err := tx.Exec(ctx, pgsql.PendingCancelEnqueue.SQL, ck.part, flow.String(), ck.id(), now); err != nil {
					return "", err
				}
			}
		}
		return MemberEligible, nil
	case edgegroup.Impossible:
		tag, err := tx.Exec(ctx, pgsql.DependencySkipChild.SQL, ck.part, ck.id(), now)
		if err != nil {
			return "", err
		}
		if tag.RowsAffected() == 1 {
			if _, err := emitCompletion(ctx, tx, ck, model.OutcomeSkipped, now, false); err != nil {
				return "", err
			}
		}
		return MemberSkipped, nil
	}
	return MemberBlocked, nil
}
