package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/model"
)

// ExecutionFields reads one execution as the fields of Valkey's exec_core
// hash: ff_exec_core's raw_fields (namespace, execution_kind,
// total_attempt_count, retry_count, failure_reason, terminal_outcome, ...;
// tags left out), then its columns under the hash's names (lane_id,
// lifecycle_phase, ownership_state, eligibility_state, public_state,
// attempt_state, blocking_reason, cancellation_reason, cancelled_by,
// current_attempt_index, priority, created_at, completed_at, flow_id,
// required_capabilities sorted and comma-joined) and the current attempt's
// current_lease_epoch. A missing execution is CodeExecutionNotFound.
func (c *Client) ExecutionFields(ctx context.Context, id model.ExecutionID) (map[string]string, error) {
	k, err := splitExecID(id)
	if err != nil {
		return nil, fmt.Errorf("read execution %s: %w", id, err)
	}
	var (
		flow                                         *[16]byte
		lane, phase, own, elig, public, attemptState string
		blocking, cancelReason, cancelledBy          *string
		caps                                         []string
		attemptIdx, priority                         int
		created                                      int64
		terminal, epoch                              *int64
		raw                                          []byte
	)
	err = c.pool.QueryRow(ctx, `SELECT e.flow_id, e.lane_id, e.lifecycle_phase, e.ownership_state, e.eligibility_state,
       e.public_state, e.attempt_state, e.blocking_reason, e.cancellation_reason, e.cancelled_by, e.required_capabilities,
       e.attempt_index, e.priority, e.created_at_ms, e.terminal_at_ms, a.lease_epoch, e.raw_fields
  FROM ff_exec_core e
  LEFT JOIN ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id
                        AND a.attempt_index = e.attempt_index
 WHERE e.partition_key = $1 AND e.execution_id = $2`, k.part, [16]byte(k.uuid)).Scan(&flow, &lane, &phase, &own, &elig,
		&public, &attemptState, &blocking, &cancelReason, &cancelledBy, &caps, &attemptIdx, &priority, &created, &terminal,
		&epoch, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read execution %s: %w", id, CodeExecutionNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read execution %s: %w", id, notMigrated(err))
	}
	f := map[string]string{}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("read execution %s: raw_fields: %w", id, err)
	}
	for name, v := range doc {
		if name == "tags" {
			continue
		}
		if s, ok := v.(string); ok {
			f[name] = s
			continue
		}
		b, _ := json.Marshal(v)
		f[name] = string(b)
	}
	slices.Sort(caps)
	for name, v := range map[string]string{"execution_id": string(id), "lane_id": lane, "lifecycle_phase": phase,
		"ownership_state": own, "eligibility_state": elig, "public_state": public, "attempt_state": attemptState,
		"current_attempt_index": strconv.Itoa(attemptIdx), "priority": strconv.Itoa(priority),
		"created_at": strconv.FormatInt(created, 10), "required_capabilities": strings.Join(caps, ",")} {
		f[name] = v
	}
	for name, v := range map[string]*string{"blocking_reason": blocking, "cancellation_reason": cancelReason, "cancelled_by": cancelledBy} {
		if v != nil {
			f[name] = *v
		}
	}
	if terminal != nil {
		f["completed_at"] = strconv.FormatInt(*terminal, 10)
	}
	if epoch != nil {
		f["current_lease_epoch"] = strconv.FormatInt(*epoch, 10)
	}
	if flow != nil {
		f["flow_id"] = model.UUID(*flow).String()
	}
	return f, nil
}

// ExecutionResult reads the result a completed execution stored (nil when
// none was). A missing execution is CodeExecutionNotFound.
func (c *Client) ExecutionResult(ctx context.Context, id model.ExecutionID) ([]byte, error) {
	k, err := splitExecID(id)
	if err != nil {
		return nil, fmt.Errorf("read result of %s: %w", id, err)
	}
	var res []byte
	err = c.pool.QueryRow(ctx, `SELECT result FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`,
		k.part, [16]byte(k.uuid)).Scan(&res)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read result of %s: %w", id, CodeExecutionNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read result of %s: %w", id, notMigrated(err))
	}
	return res, nil
}

// CancelExecutionParams are the inputs of CancelExecution.
type CancelExecutionParams struct {
	ExecutionID model.ExecutionID
	// Reason is stored in cancellation_reason.
	Reason string
	// Source is stored in cancelled_by (e.g. "operator_override").
	Source string
}

// CancelExecution cancels a non-terminal execution, lease or not, as
// FlowFabric's ff_cancel_execution does on Valkey:
//
//	ff_exec_core: terminal / unowned / not_applicable / cancelled / attempt_terminal,
//	  terminal_at_ms, cancellation_reason, cancelled_by, raw_fields.terminal_outcome cancelled
//	ff_attempt (current, when it started): outcome cancelled, terminal_at_ms, lease NULL
//	ff_suspension_current: deleted (no timeout acts on it later)
//	ff_waitpoint_pending: the execution's waitpoints deleted (no signal reaches it)
//	ff_completion_event: cancelled → NOTIFY ff_completion (a flow cascades)
//	ff_lease_event: revoked, when it was active
//
// A terminal execution is CodeExecutionNotActive, a missing one
// CodeExecutionNotFound. Upstream's Postgres cancel_execution writes
// lifecycle_phase 'cancelled' and emits no completion event (spec §9
// items 3 and 5), so its flows never learn of it and a lease holder can
// still complete; fabric ends it the way every other terminal path does,
// and the holder's next fenced call finds it not active.
//
// It returns the lifecycle phase the execution was cancelled from, as
// ff_cancel_execution's reply does.
func (c *Client) CancelExecution(ctx context.Context, p *CancelExecutionParams) (string, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return "", fmt.Errorf("cancel execution %s: %w", p.ExecutionID, err)
	}
	var phase string
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		var idx int
		err := tx.QueryRow(ctx, `SELECT lifecycle_phase, attempt_index FROM ff_exec_core
 WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, k.part, [16]byte(k.uuid)).Scan(&phase, &idx)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeExecutionNotFound
		}
		if err != nil {
			return err
		}
		if phase == model.PhaseTerminal {
			return fmt.Errorf("%w: phase %s", CodeExecutionNotActive, phase)
		}
		return cancelLocked(ctx, tx, k, phase, idx, p.Reason, p.Source, now)
	})
	if err != nil {
		return "", fmt.Errorf("cancel execution %s: %w", p.ExecutionID, err)
	}
	return phase, nil
}

// cancelLocked ends a locked, non-terminal execution cancelled (see
// CancelExecution for what it writes); phase and idx are its lifecycle
// phase and attempt index as read under the lock.
func cancelLocked(ctx context.Context, tx pgx.Tx, k execKey, phase string, idx int, reason, source string, now int64) error {
	if _, err := tx.Exec(ctx, `UPDATE ff_attempt SET terminal_at_ms = $4, outcome = 'cancelled', lease_expires_at_ms = NULL,
       raw_fields = raw_fields || jsonb_build_object('failure_reason', 'cancelled: ' || $5::text)
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 AND terminal_at_ms IS NULL`,
		k.part, [16]byte(k.uuid), idx, now, reason); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
UPDATE ff_exec_core
   SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
       public_state = 'cancelled', attempt_state = 'attempt_terminal', terminal_at_ms = $3,
       cancellation_reason = $4, cancelled_by = $5,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text, 'terminal_outcome', 'cancelled')
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), now, reason, source); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM ff_suspension_current WHERE partition_key = $1 AND execution_id = $2`,
		k.part, [16]byte(k.uuid)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM ff_waitpoint_pending WHERE partition_key = $1 AND execution_id = $2`,
		k.part, [16]byte(k.uuid)); err != nil {
		return err
	}
	if _, err := emitCompletion(ctx, tx, k, model.OutcomeCancelled, now, false); err != nil {
		return err
	}
	if phase == model.PhaseActive {
		return emitLeaseEvent(ctx, tx, k, LeaseEventRevoked, "cancelled", now)
	}
	return nil
}
