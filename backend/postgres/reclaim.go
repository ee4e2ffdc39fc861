package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/model/pgsql"
)

// maxReclaimExpr reads policy.max_reclaim_count as ff_reclaim_execution
// does (a number overrides the default), the default ($6,
// fcall.DefaultMaxReclaimCount) otherwise.
const maxReclaimExpr = `CASE WHEN jsonb_typeof(e.policy->'max_reclaim_count') = 'number'
             AND (e.policy->>'max_reclaim_count') ~ '^[0-9]{1,9}$'
            THEN (e.policy->>'max_reclaim_count')::int ELSE $6::int END`

// sqlReclaimCandidates picks and locks up to $5 executions of lane $2 on
// partitions $1 whose lease a worker may take over: active and marked
// expired or revoked, or still leased with a lease that ran out by $4 (no
// lease-expiry scanner marked it yet: a worker without a host reclaims
// too), whose required capabilities $3 covers. Rows other sessions hold
// are skipped.
const sqlReclaimCandidates = `SELECT e.partition_key, e.execution_id, e.attempt_index, e.ownership_state,
       e.lease_reclaim_count, ` + maxReclaimExpr + `, a.lease_epoch, a.raw_fields->'` + pgsql.AttemptDeadlineField + `'
  FROM ff_exec_core e
  JOIN ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id
                   AND a.attempt_index = e.attempt_index
 WHERE e.partition_key = ANY($1::smallint[]) AND a.partition_key = ANY($1::smallint[])
   AND e.lane_id = $2
   AND e.lifecycle_phase = 'active'
   AND (e.ownership_state IN ('lease_expired_reclaimable', 'lease_revoked')
        OR (e.ownership_state = 'leased' AND a.lease_expires_at_ms <= $4))
   AND e.required_capabilities <@ $3::text[]
 ORDER BY e.partition_key, e.execution_id
 LIMIT $5
 FOR UPDATE OF e, a SKIP LOCKED`

// Reclaim writes (see Client.Reclaim).
const (
	sqlReclaimEndAttempt = `UPDATE ff_attempt
   SET outcome = 'interrupted_reclaimed', lease_expires_at_ms = NULL, terminal_at_ms = $4,
       raw_fields = raw_fields || jsonb_build_object('failure_reason', $5::text)
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`
	sqlReclaimNewAttempt = `INSERT INTO ff_attempt AS a (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
                             lease_epoch, lease_expires_at_ms, started_at_ms, raw_fields)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (partition_key, execution_id, attempt_index) DO UPDATE
   SET worker_id = EXCLUDED.worker_id, worker_instance_id = EXCLUDED.worker_instance_id,
       lease_epoch = EXCLUDED.lease_epoch, lease_expires_at_ms = EXCLUDED.lease_expires_at_ms,
       started_at_ms = EXCLUDED.started_at_ms, terminal_at_ms = NULL, outcome = NULL, raw_fields = EXCLUDED.raw_fields`
	sqlReclaimCore = `UPDATE ff_exec_core e
   SET lifecycle_phase = 'active', ownership_state = 'leased', eligibility_state = 'not_applicable',
       public_state = 'running', attempt_state = 'running_attempt', blocking_reason = NULL,
       attempt_index = $3, lease_reclaim_count = e.lease_reclaim_count + 1,
       raw_fields = (e.raw_fields - 'lease_expired_at') || jsonb_build_object(
           'last_mutation_at', $4::bigint::text,
           'current_worker_instance_id', $5::text,
           'lease_reclaim_count', (e.lease_reclaim_count + 1)::text,
           'total_attempt_count', (COALESCE((e.raw_fields->>'total_attempt_count')::bigint, 0) + 1)::text)
 WHERE partition_key = $1 AND execution_id = $2
RETURNING e.lane_id, COALESCE(e.raw_fields->>'execution_kind', ''), COALESCE(e.raw_fields->>'namespace', ''),
          e.payload, COALESCE(e.flow_id::text, '')`
	sqlReclaimCapAttempt = `UPDATE ff_attempt
   SET lease_expires_at_ms = NULL, terminal_at_ms = $4, outcome = COALESCE(outcome, 'lease_expired_reclaimable')
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`
	sqlReclaimCapCore = `UPDATE ff_exec_core
   SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
       public_state = 'failed', attempt_state = 'attempt_terminal', blocking_reason = NULL, terminal_at_ms = $3,
       raw_fields = (raw_fields - 'lease_expired_at') || jsonb_build_object('last_mutation_at', $3::bigint::text,
           'failure_reason', 'max_reclaims_exceeded', 'terminal_outcome', 'failed')
 WHERE partition_key = $1 AND execution_id = $2`
)

// Reclaim takes over up to n expired or revoked leases of p's lane on
// p.Partitions (required here, unlike in ClaimNext), each with a new attempt of type "reclaim", as
// ff_issue_reclaim_grant + ff_reclaim_execution do on Valkey: the
// execution's attempt index and lease epoch move on by one, and a lease
// no lease-expiry scanner has marked yet is taken over too once it ran
// out (it is marked first, as ff_mark_lease_expired_if_due would), so a
// worker reclaims without a host. Nothing to reclaim is (nil, nil). Per
// execution, in one transaction (the rows locked, others' skipped):
//
//	ff_attempt (old): outcome interrupted_reclaimed, lease NULL, terminal_at_ms now,
//	  raw_fields.failure_reason lease_<ownership_state>
//	ff_attempt (new, attempt_index+1): the worker's lease, lease_epoch old+1,
//	  raw_fields attempt_type reclaim, reclaim_reason, previous_attempt_index and
//	  the old attempt's deadline (the Valkey attempt_timeout entry outlives a reclaim)
//	ff_exec_core: active / leased / not_applicable / running / running_attempt,
//	  attempt_index+1, lease_reclaim_count+1, raw_fields.total_attempt_count+1
//	ff_lease_event: expired (when it was not marked yet), reclaimed
//
// Past the reclaim cap (policy.max_reclaim_count, else
// fcall.DefaultMaxReclaimCount) the execution fails terminally instead
// (failure_reason max_reclaims_exceeded, ff_completion_event failed, the
// old attempt's lease cleared), as ff_reclaim_execution fails it on
// Valkey; it is not returned.
func (c *Client) Reclaim(ctx context.Context, p *backend.ClaimNextParams, n int) ([]*ClaimResult, error) {
	if p.LeaseTTLMs <= 0 || p.LaneID == "" || len(p.Partitions) == 0 {
		return nil, fmt.Errorf("reclaim (lane %s): %w: lane, partitions and lease_ttl_ms > 0 are required", p.LaneID, CodeInvalidInput)
	}
	n = max(n, 1)
	caps := p.Capabilities
	if caps == nil {
		caps = []string{}
	}
	parts := make([]int16, len(p.Partitions))
	for i, pt := range p.Partitions {
		pk, err := partitionKey(pt)
		if err != nil {
			return nil, fmt.Errorf("reclaim (lane %s): %w", p.LaneID, err)
		}
		parts[i] = pk
	}
	var out []*ClaimResult
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		now := c.nowMs()
		rows, err := tx.Query(ctx, sqlReclaimCandidates, parts, p.LaneID, caps, now, n, fcall.DefaultMaxReclaimCount)
		if err != nil {
			return notMigrated(err)
		}
		type cand struct {
			k                    execKey
			idx, reclaims, limit int
			own                  string
			epoch                int64
			deadline             []byte
		}
		var cands []cand
		for rows.Next() {
			var x cand
			var uuid [16]byte
			if err := rows.Scan(&x.k.part, &uuid, &x.idx, &x.own, &x.reclaims, &x.limit, &x.epoch, &x.deadline); err != nil {
				rows.Close()
				return err
			}
			x.k.uuid = uuid
			cands = append(cands, x)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, x := range cands {
			uuid := [16]byte(x.k.uuid)
			if x.own == model.OwnershipLeased {
				// Not marked yet: mark it as the lease-expiry scanner would.
				if err := emitLeaseEvent(ctx, tx, x.k, LeaseEventExpired, "", now); err != nil {
					return err
				}
				x.own = model.OwnershipLeaseExpiredReclaimable
			}
			if x.reclaims >= x.limit {
				if _, err := tx.Exec(ctx, sqlReclaimCapAttempt, x.k.part, uuid, x.idx, now); err != nil {
					return fmt.Errorf("reclaim %s: cap: %w", x.k.execID(), err)
				}
				if _, err := tx.Exec(ctx, sqlReclaimCapCore, x.k.part, uuid, now); err != nil {
					return fmt.Errorf("reclaim %s: cap: %w", x.k.execID(), err)
				}
				if _, err := emitCompletion(ctx, tx, x.k, model.OutcomeFailed, now, false); err != nil {
					return fmt.Errorf("reclaim %s: cap: %w", x.k.execID(), err)
				}
				c.log.Warn("reclaim: execution failed past its reclaim cap", "execution_id", string(x.k.execID()),
					"reclaims", x.reclaims, "max_reclaim_count", x.limit)
				continue
			}
			cause := "lease_" + x.own
			if _, err := tx.Exec(ctx, sqlReclaimEndAttempt, x.k.part, uuid, x.idx, now, cause); err != nil {
				return fmt.Errorf("reclaim %s: end attempt %d: %w", x.k.execID(), x.idx, err)
			}
			raw := map[string]any{"attempt_type": "reclaim", "reclaim_reason": cause, "previous_attempt_index": x.idx}
			if len(x.deadline) > 0 && string(x.deadline) != "null" {
				raw[pgsql.AttemptDeadlineField] = rawJSON(x.deadline)
			}
			idx, epoch, expires := x.idx+1, x.epoch+1, now+p.LeaseTTLMs
			if _, err := tx.Exec(ctx, sqlReclaimNewAttempt, x.k.part, uuid, idx, p.WorkerID, p.WorkerInstanceID,
				epoch, expires, now, raw); err != nil {
				return fmt.Errorf("reclaim %s: new attempt %d: %w", x.k.execID(), idx, err)
			}
			var lane, kind, ns, flow string
			var payload []byte
			err := tx.QueryRow(ctx, sqlReclaimCore, x.k.part, uuid, idx, now, p.WorkerInstanceID).
				Scan(&lane, &kind, &ns, &payload, &flow)
			if err != nil {
				return fmt.Errorf("reclaim %s: %w", x.k.execID(), err)
			}
			if err := emitLeaseEvent(ctx, tx, x.k, LeaseEventReclaimed, "", now); err != nil {
				return err
			}
			f := newFence(x.k, idx, uint64(epoch))
			out = append(out, &ClaimResult{ExecutionID: x.k.execID(), LeaseID: f.LeaseID, LeaseEpoch: f.LeaseEpoch,
				ExpiresAt: expires, AttemptID: f.AttemptID, AttemptIndex: idx, AttemptType: "reclaim",
				LaneID: lane, Kind: kind, Namespace: ns, Payload: payload, FlowID: flow})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reclaim (lane %s): %w", p.LaneID, err)
	}
	return out, nil
}

// rawJSON is a JSON value stored as read (a jsonb member), marshalled
// unchanged.
type rawJSON []byte

// MarshalJSON returns the value itself.
func (r rawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return nil, errors.New("empty JSON value")
	}
	return r, nil
}
