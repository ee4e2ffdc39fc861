package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// CodeExecutionNotTerminal: a replay of an execution that has not ended
// (flowfabric's execution_not_terminal).
const CodeExecutionNotTerminal ErrorCode = "execution_not_terminal"

// Operator events (ff_operator_event.event_type).
const (
	OperatorEventPriorityChanged = "priority_changed"
	OperatorEventReplayed        = "replayed"
)

// emitOperatorEvent appends one ff_operator_event row for the execution
// in tx (NOTIFY ff_operator_event at commit), its namespace and
// instance tag copied from the execution as upstream's outbox does.
func emitOperatorEvent(ctx context.Context, tx pgx.Tx, k execKey, eventType string, details map[string]any, now int64) error {
	b, err := json.Marshal(details)
	if err != nil {
		return fmt.Errorf("operator event %s: %w", eventType, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ff_operator_event (execution_id, event_type, details, occurred_at_ms, partition_key, namespace, instance_tag)
SELECT $1::text, $2, $3::jsonb, $4, $5::int, c.raw_fields->>'namespace', c.raw_fields->'tags'->>'cairn.instance_id'
  FROM (SELECT 1) AS one
  LEFT JOIN ff_exec_core c ON c.partition_key = $5::smallint AND c.execution_id = $1::uuid`,
		k.id(), eventType, string(b), now, k.part); err != nil {
		return fmt.Errorf("operator event %s: %w", eventType, err)
	}
	return nil
}

// ChangePriority sets a runnable, eligible execution's priority, clamped
// to 0..model.PriorityMax as ff_change_priority clamps it, and records a
// priority_changed operator event ({"old_priority", "new_priority"}).
// It returns the old and the new priority. A missing execution is
// CodeExecutionNotFound; one that is not runnable and eligible now
// (leased, delayed, blocked, suspended, ended) CodeExecutionNotEligible,
// and nothing is written.
func (c *Client) ChangePriority(ctx context.Context, id model.ExecutionID, priority int) (*fcall.ChangePriorityResult, error) {
	k, err := splitExecID(id)
	if err != nil {
		return nil, fmt.Errorf("change priority of %s: %w", id, err)
	}
	priority = min(max(priority, 0), model.PriorityMax)
	res := &fcall.ChangePriorityResult{New: int64(priority)}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		var phase, eligibility string
		err := tx.QueryRow(ctx, `SELECT lifecycle_phase, eligibility_state, priority FROM ff_exec_core
 WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, k.part, [16]byte(k.uuid)).Scan(&phase, &eligibility, &res.Old)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeExecutionNotFound
		}
		if err != nil {
			return err
		}
		if phase != model.PhaseRunnable || eligibility != model.EligibleNow {
			return fmt.Errorf("%w: phase %s, eligibility %s", CodeExecutionNotEligible, phase, eligibility)
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core
   SET priority = $3, raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $4::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), priority, now); err != nil {
			return err
		}
		return emitOperatorEvent(ctx, tx, k, OperatorEventPriorityChanged,
			map[string]any{"old_priority": res.Old, "new_priority": priority}, now)
	})
	if err != nil {
		return nil, fmt.Errorf("change priority of %s: %w", id, err)
	}
	return res, nil
}

// ReplayResult is what ReplayExecution did.
type ReplayResult struct {
	// ReplayCount is the execution's replays, this one included.
	ReplayCount int
	// PublicState is the execution's public state after the replay
	// (model.PublicWaiting).
	PublicState string
}

// ReplayExecution runs an ended execution again, as upstream's Postgres
// replay_execution does on its normal branch:
//
//	ff_exec_core: runnable / unowned / eligible_now / waiting / pending_replay_attempt,
//	  terminal_at_ms, result, cancellation_reason, cancelled_by cleared,
//	  raw_fields.replay_count + 1, terminal_outcome none
//	ff_attempt (current): outcome, terminal_at_ms, worker and lease cleared,
//	  lease_epoch + 1 (the next claim reuses the attempt index, as upstream)
//	ff_operator_event: replayed {"branch": "normal"}
//
// A missing execution is CodeExecutionNotFound, one not ended
// CodeExecutionNotTerminal. Two kinds of flow member are refused
// (CodeInvalidInput) and nothing is written:
//   - a skipped one: upstream's skipped branch zeroes its edge groups'
//     running counts, which fabric's dependency resolution reads as "no
//     parent left to wait for", so the member would wait for good;
//   - one with downstream members: the edge groups count completions,
//     not edges, so its second completion would count again and could
//     release a downstream before its other parents end (upstream's
//     replay has the same hazard; Valkey's per-edge states do not).
//
// A standalone execution and a flow's leaf replay.
func (c *Client) ReplayExecution(ctx context.Context, id model.ExecutionID) (*ReplayResult, error) {
	k, err := splitExecID(id)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", id, err)
	}
	res := &ReplayResult{PublicState: model.PublicWaiting}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		var phase, public string
		var flow *[16]byte
		var idx int
		var replays *string
		err := tx.QueryRow(ctx, `SELECT lifecycle_phase, public_state, flow_id, attempt_index, raw_fields->>'replay_count' FROM ff_exec_core
 WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, k.part, [16]byte(k.uuid)).Scan(&phase, &public, &flow, &idx, &replays)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeExecutionNotFound
		}
		if err != nil {
			return err
		}
		if phase != model.PhaseTerminal {
			return fmt.Errorf("%w: phase %s", CodeExecutionNotTerminal, phase)
		}
		if flow != nil {
			if public == model.PublicSkipped {
				return fmt.Errorf("%w: %s is a skipped flow member; its replay is not offered on Postgres", CodeInvalidInput, id)
			}
			var downstream bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ff_edge WHERE partition_key = $1 AND flow_id = $2 AND upstream_eid = $3)`,
				k.part, *flow, [16]byte(k.uuid)).Scan(&downstream); err != nil {
				return err
			}
			if downstream {
				return fmt.Errorf("%w: %s has downstream flow members, whose edge groups would count its next completion again; its replay is not offered on Postgres",
					CodeInvalidInput, id)
			}
		}
		res.ReplayCount = 1
		if replays != nil {
			if n, err := strconv.Atoi(*replays); err == nil && n > 0 {
				res.ReplayCount = n + 1
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core
   SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'eligible_now',
       public_state = 'waiting', attempt_state = 'pending_replay_attempt', blocking_reason = NULL,
       terminal_at_ms = NULL, result = NULL, cancellation_reason = NULL, cancelled_by = NULL,
       raw_fields = raw_fields || jsonb_build_object('replay_count', $3::int::text, 'terminal_outcome', 'none',
                                                     'last_mutation_at', $4::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), res.ReplayCount, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt
   SET outcome = NULL, terminal_at_ms = NULL, worker_id = NULL, worker_instance_id = NULL,
       lease_expires_at_ms = NULL, lease_epoch = lease_epoch + 1
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, [16]byte(k.uuid), idx); err != nil {
			return err
		}
		return emitOperatorEvent(ctx, tx, k, OperatorEventReplayed, map[string]any{"branch": "normal"}, now)
	})
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", id, err)
	}
	return res, nil
}
