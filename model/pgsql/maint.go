package pgsql

// Tables of the maintenance reconcilers.
const (
	TBudgetPolicy = "ff_budget_policy"
	TBudgetUsage  = "ff_budget_usage"
	TFlowCore     = "ff_flow_core"
	TFlowSummary  = "ff_flow_summary"
)

// resetIntervalExpr reads policy_json.reset_interval_ms as a bigint, 0
// when it is absent or not a plain non-negative integer (upstream's
// default of 0: no next reset).
const resetIntervalExpr = `CASE WHEN jsonb_typeof(policy_json->'reset_interval_ms') = 'number'
             AND (policy_json->>'reset_interval_ms') ~ '^[0-9]{1,15}$'
            THEN (policy_json->>'reset_interval_ms')::bigint ELSE 0 END`

// Budget-reset reconciler (upstream reconcilers/budget_reset), on the
// budget partitions: a budget's partition_key is its budget partition.
var (
	// BudgetResetScan lists the budget ids of the partition whose reset
	// time has come, the most overdue first.
	BudgetResetScan = Statement{
		Name: "budget_reset.scan",
		SQL: `SELECT budget_id FROM ff_budget_policy
 WHERE partition_key = $1 AND next_reset_at_ms IS NOT NULL AND next_reset_at_ms <= $2
 ORDER BY next_reset_at_ms ASC
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TBudgetPolicy},
	}
	// BudgetResetPolicy re-checks a budget under its row lock and, when
	// its reset is still due, clears its last breach and schedules the
	// next reset (now + policy_json.reset_interval_ms; NULL when that is
	// 0). Returns the new next_reset_at_ms (NULL: unscheduled); no row:
	// not due any more (reset meanwhile) or gone. breach_count and
	// soft_breach_count are kept, as upstream keeps them.
	BudgetResetPolicy = Statement{
		Name: "budget_reset.reset_policy",
		SQL: `UPDATE ff_budget_policy
   SET last_breach_at_ms = NULL, last_breach_dim = NULL, updated_at_ms = $3,
       next_reset_at_ms = CASE WHEN ` + resetIntervalExpr + ` > 0 THEN $3 + ` + resetIntervalExpr + ` END
 WHERE partition_key = $1 AND budget_id = $2 AND next_reset_at_ms IS NOT NULL AND next_reset_at_ms <= $3
RETURNING next_reset_at_ms`,
		Params: []string{"partition_key", "budget_id", "now_ms"},
		Tables: []string{TBudgetPolicy},
	}
	// BudgetResetUsage zeroes every usage dimension of a budget.
	BudgetResetUsage = Statement{
		Name: "budget_reset.reset_usage",
		SQL: `UPDATE ff_budget_usage SET current_value = 0, last_reset_at_ms = $3, updated_at_ms = $3
 WHERE partition_key = $1 AND budget_id = $2`,
		Params: []string{"partition_key", "budget_id", "now_ms"},
		Tables: []string{TBudgetUsage},
	}
)

// Execution-deadline reconciler (upstream reconcilers/execution_deadline,
// whose per-execution hook upstream never drives on Postgres: spec §5.1).
// deadline_at_ms is the execution deadline on every phase but a delayed
// one (runnable / not_eligible_until_time), where it is the delay.
var (
	// ExecDeadlineScan lists execution ids of the partition whose
	// execution deadline passed before now and that have not ended:
	// active, suspended, or runnable and not delayed; most overdue first.
	ExecDeadlineScan = Statement{
		Name: "execution_deadline.scan",
		SQL: `SELECT execution_id::text FROM ff_exec_core
 WHERE partition_key = $1 AND deadline_at_ms IS NOT NULL AND deadline_at_ms < $2
   AND (lifecycle_phase IN ('active', 'suspended')
        OR (lifecycle_phase = 'runnable' AND eligibility_state <> 'not_eligible_until_time'))
 ORDER BY deadline_at_ms ASC
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TExecCore},
	}
	// ExecDeadlineLock locks an execution and reads what the deadline
	// decision needs: (attempt_index, lifecycle_phase, eligibility_state,
	// deadline_at_ms).
	ExecDeadlineLock = Statement{
		Name: "execution_deadline.lock",
		SQL: `SELECT attempt_index, lifecycle_phase, eligibility_state, deadline_at_ms
  FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2::uuid FOR UPDATE`,
		Params: []string{"partition_key", "execution_id"},
		Tables: []string{TExecCore},
	}
	// ExecCoreExpireDeadline ends an execution whose deadline passed as
	// expired (public_state expired, failure_reason execution_deadline).
	ExecCoreExpireDeadline = Statement{
		Name: "execution_deadline.expire",
		SQL: `UPDATE ff_exec_core
   SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
       public_state = 'expired', attempt_state = 'attempt_terminal', blocking_reason = NULL, terminal_at_ms = $3,
       raw_fields = raw_fields || jsonb_build_object('last_failure_message', 'execution_deadline',
           'failure_reason', 'execution_deadline', 'last_mutation_at', $3::bigint::text, 'terminal_outcome', 'expired')
 WHERE partition_key = $1 AND execution_id = $2::uuid AND lifecycle_phase IN ('active', 'suspended', 'runnable')`,
		Params: []string{"partition_key", "execution_id", "now_ms"},
		Tables: []string{TExecCore},
	}
)

// Pending-waitpoint expiry (upstream reconcilers/pending_wp_expiry, whose
// per-waitpoint hook upstream never drives on Postgres). Only pending
// waitpoints (created ahead of a suspension, state 'pending') expire here;
// an active one belongs to its suspension and ends with it
// (suspension_timeout).
var (
	// WaitpointExpiryScan lists waitpoint ids of the partition's pending
	// waitpoints that expired before now, oldest first.
	WaitpointExpiryScan = Statement{
		Name: "pending_wp_expiry.scan",
		SQL: `SELECT waitpoint_id::text FROM ff_waitpoint_pending
 WHERE partition_key = $1 AND expires_at_ms IS NOT NULL AND expires_at_ms < $2 AND state = 'pending'
 ORDER BY expires_at_ms ASC
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TWaitpoint},
	}
	// WaitpointExpireDelete deletes a pending waitpoint still expired
	// under its row lock and returns (execution_id, member key: the
	// waitpoint key, or its id when the key is empty); no row: it was
	// committed, extended or removed meanwhile.
	WaitpointExpireDelete = Statement{
		Name: "pending_wp_expiry.delete",
		SQL: `DELETE FROM ff_waitpoint_pending
 WHERE partition_key = $1 AND waitpoint_id = $2::uuid AND expires_at_ms IS NOT NULL AND expires_at_ms < $3 AND state = 'pending'
RETURNING execution_id::text, CASE WHEN waitpoint_key <> '' THEN waitpoint_key ELSE waitpoint_id::text END`,
		Params: []string{"partition_key", "waitpoint_id", "now_ms"},
		Tables: []string{TWaitpoint},
	}
	// SuspensionMarkNeverCommitted records in the execution's suspension
	// member_map (if it has one) that the waitpoint member closed without
	// ever being committed.
	SuspensionMarkNeverCommitted = Statement{
		Name: "pending_wp_expiry.mark_member",
		SQL: `UPDATE ff_suspension_current
   SET member_map = jsonb_set(member_map, ARRAY[$3::text],
         jsonb_build_object('status', 'never_committed', 'closed_at_ms', $4::bigint, 'source', 'pending_wp_expiry'))
 WHERE partition_key = $1 AND execution_id = $2::uuid`,
		Params: []string{"partition_key", "execution_id", "member_key", "now_ms"},
		Tables: []string{TSuspension},
	}
)

// Flow summary projection (upstream project_flow_summary, migration 0019,
// which nothing drives on Postgres): the derived rollup of a flow's member
// states, never the authoritative ff_flow_core.public_flow_state.
var (
	// FlowSummaryScan lists flow ids of the partition that have members,
	// those never projected first, then the least recently projected.
	FlowSummaryScan = Statement{
		Name: "flow_summary.scan",
		SQL: `SELECT f.flow_id::text FROM ff_flow_core f
  LEFT JOIN ff_flow_summary s ON s.partition_key = f.partition_key AND s.flow_id = f.flow_id
 WHERE f.partition_key = $1 AND (s.flow_id IS NULL OR s.last_summary_update_at < $2)
   AND EXISTS (SELECT 1 FROM ff_exec_core c WHERE c.partition_key = f.partition_key AND c.flow_id = f.flow_id)
 ORDER BY s.last_summary_update_at ASC NULLS FIRST, f.flow_id
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TFlowCore, TFlowSummary, TExecCore},
	}
	// FlowSummaryProject counts a flow's members by public_state (every
	// member: sampled = total) and upserts its summary row with the
	// derived state: all members ended → failed when any failed, was
	// cancelled or expired, else completed; any running → running; any
	// suspended, delayed, rate limited or waiting for children → blocked;
	// else open. Returns the derived state; no row: the flow has no
	// members.
	FlowSummaryProject = Statement{
		Name: "flow_summary.project",
		SQL: `WITH m AS (
  SELECT count(*) AS total,
         count(*) FILTER (WHERE public_state = 'completed') AS completed,
         count(*) FILTER (WHERE public_state = 'failed') AS failed,
         count(*) FILTER (WHERE public_state = 'cancelled') AS cancelled,
         count(*) FILTER (WHERE public_state = 'expired') AS expired,
         count(*) FILTER (WHERE public_state = 'skipped') AS skipped,
         count(*) FILTER (WHERE public_state IN ('active', 'running')) AS active,
         count(*) FILTER (WHERE public_state = 'suspended') AS suspended,
         count(*) FILTER (WHERE public_state = 'waiting') AS waiting,
         count(*) FILTER (WHERE public_state = 'delayed') AS delayed,
         count(*) FILTER (WHERE public_state = 'rate_limited') AS rate_limited,
         count(*) FILTER (WHERE public_state = 'waiting_children') AS waiting_children
    FROM ff_exec_core WHERE partition_key = $1 AND flow_id = $2::uuid
)
INSERT INTO ff_flow_summary (partition_key, flow_id, total_members, sampled_members, members_completed, members_failed,
       members_cancelled, members_expired, members_skipped, members_active, members_suspended, members_waiting,
       members_delayed, members_rate_limited, members_waiting_children, public_flow_state, last_summary_update_at)
SELECT $1, $2::uuid, total, total, completed, failed, cancelled, expired, skipped, active, suspended, waiting,
       delayed, rate_limited, waiting_children,
       CASE WHEN completed + failed + cancelled + expired + skipped = total
                 THEN CASE WHEN failed + cancelled + expired > 0 THEN 'failed' ELSE 'completed' END
            WHEN active > 0 THEN 'running'
            WHEN suspended + delayed + rate_limited + waiting_children > 0 THEN 'blocked'
            ELSE 'open' END,
       $3
  FROM m WHERE total > 0
ON CONFLICT (partition_key, flow_id) DO UPDATE SET
       total_members = EXCLUDED.total_members, sampled_members = EXCLUDED.sampled_members,
       members_completed = EXCLUDED.members_completed, members_failed = EXCLUDED.members_failed,
       members_cancelled = EXCLUDED.members_cancelled, members_expired = EXCLUDED.members_expired,
       members_skipped = EXCLUDED.members_skipped, members_active = EXCLUDED.members_active,
       members_suspended = EXCLUDED.members_suspended, members_waiting = EXCLUDED.members_waiting,
       members_delayed = EXCLUDED.members_delayed, members_rate_limited = EXCLUDED.members_rate_limited,
       members_waiting_children = EXCLUDED.members_waiting_children,
       public_flow_state = EXCLUDED.public_flow_state, last_summary_update_at = EXCLUDED.last_summary_update_at
RETURNING public_flow_state`,
		Params: []string{"partition_key", "flow_id", "now_ms"},
		Tables: []string{TExecCore, TFlowSummary},
	}
)

// maintStatements are the maintenance statements of All.
var maintStatements = []Statement{
	BudgetResetScan, BudgetResetPolicy, BudgetResetUsage,
	ExecDeadlineScan, ExecDeadlineLock, ExecCoreExpireDeadline,
	WaitpointExpiryScan, WaitpointExpireDelete, SuspensionMarkNeverCommitted,
	FlowSummaryScan, FlowSummaryProject,
}

// DeadlineExpires is the decision on an execution ExecDeadlineLock read:
// whether its execution deadline (hasDeadline, deadline) passed before now
// in a phase that ends on it (active, suspended, or runnable and not
// delayed, whose deadline_at_ms is its delay). The native reconciler and
// the pg_execution_deadline plugin both decide with it.
func DeadlineExpires(phase, eligibility string, hasDeadline bool, deadline, now int64) bool {
	if !hasDeadline || deadline >= now {
		return false
	}
	switch phase {
	case "active", "suspended":
		return true
	case "runnable":
		return eligibility != "not_eligible_until_time"
	}
	return false
}
