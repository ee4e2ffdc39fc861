// Package pgsql is the catalog of named SQL statements fabric runs on its
// Postgres backend: the native operations of backend/postgres and the
// Postgres scanner plugins both use these texts, so a reconciler behaves
// the same whether it runs in the host process or in a wasm plugin.
//
// A plugin never sends SQL: it names a statement of this catalog and binds
// its parameters (the sql_query host function). The host runs only the
// text compiled into itself, so a plugin built against an older or altered
// copy of this package still runs the host's statements. Every statement
// declares the tables it touches; a plugin's manifest grants statements by
// name and tables as "table.<name>" entries of capabilities.sql, and the
// host refuses a statement whose tables are not all granted.
//
// # Notes
//
//   - Parameters are positional ($1, $2, ...); Params documents them.
//     Execution ids are bound as the bare uuid text and partition keys as
//     integers; result columns are plain scalars (uuids and jsonb are cast
//     to text) so a plugin needs no Postgres type knowledge.
//   - Pure Go with no dependencies beyond the standard library, so plugins
//     can import it.
package pgsql

import (
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/model/sqlstmt"
)

// Statement is one named statement of the catalog (defined in
// model/sqlstmt, which the pdk imports without this catalog).
type Statement = sqlstmt.Statement

// TableGrant is the capabilities.sql entry granting table t.
func TableGrant(t string) string { return "table." + t }

// IsTableGrant reports whether a capabilities.sql entry grants a table,
// and which.
func IsTableGrant(entry string) (string, bool) {
	return strings.CutPrefix(entry, "table.")
}

// Grants returns the capabilities.sql entries a plugin running stmts
// needs: the statement names, then their tables, without duplicates.
func Grants(stmts ...Statement) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, s := range stmts {
		add(s.Name)
	}
	for _, s := range stmts {
		for _, t := range s.Tables {
			add(TableGrant(t))
		}
	}
	return out
}

// catalog indexes All by name.
var catalog = func() map[string]Statement {
	m := make(map[string]Statement, len(All))
	for _, s := range All {
		if _, dup := m[s.Name]; dup {
			panic("pgsql: duplicate statement " + s.Name)
		}
		m[s.Name] = s
	}
	return m
}()

// Lookup returns the statement named name.
func Lookup(name string) (Statement, bool) {
	s, ok := catalog[name]
	return s, ok
}

// Table names.
const (
	TExecCore      = "ff_exec_core"
	TAttempt       = "ff_attempt"
	TCompletion    = "ff_completion_event"
	TLeaseEvent    = "ff_lease_event"
	TSuspension    = "ff_suspension_current"
	TWaitpoint     = "ff_waitpoint_pending"
	TClaimGrant    = "ff_claim_grant"
	TStreamFrame   = "ff_stream_frame"
	TStreamMeta    = "ff_stream_meta"
	TStreamSummary = "ff_stream_summary"
	TSignalEvent   = "ff_signal_event"
	TOperatorEvent = "ff_operator_event"
)

// maxRetriesExpr reads policy.retry_policy.max_retries as an int, 0 when it
// is absent or not a plain non-negative integer (upstream's u32 parse with
// a default of 0).
const maxRetriesExpr = `CASE WHEN jsonb_typeof(policy->'retry_policy'->'max_retries') = 'number'
             AND (policy->'retry_policy'->>'max_retries') ~ '^[0-9]{1,9}$'
            THEN (policy->'retry_policy'->>'max_retries')::int ELSE 0 END`

// Shared row operations.
var (
	// ExecCoreLock locks an execution row and reads what the timeout
	// reconcilers decide on.
	ExecCoreLock = Statement{
		Name: "exec_core.lock",
		SQL: `SELECT attempt_index, lifecycle_phase, ` + maxRetriesExpr + ` AS max_retries
  FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2::uuid FOR UPDATE`,
		Params: []string{"partition_key", "execution_id"},
		Tables: []string{TExecCore},
	}
	// AttemptLockLease locks an attempt row and reads its lease expiry
	// (NULL: no live lease).
	AttemptLockLease = Statement{
		Name: "attempt.lock_lease",
		SQL: `SELECT lease_expires_at_ms FROM ff_attempt
 WHERE partition_key = $1 AND execution_id = $2::uuid AND attempt_index = $3 FOR UPDATE`,
		Params: []string{"partition_key", "execution_id", "attempt_index"},
		Tables: []string{TAttempt},
	}
	// CompletionInsert appends an ff_completion_event row for the
	// execution (NOTIFY ff_completion at commit) and returns its event id.
	// with_namespace copies the execution's namespace / instance_tag raw
	// fields (upstream's typed complete); other producers write NULL.
	CompletionInsert = Statement{
		Name: "completion.insert",
		SQL: `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
SELECT partition_key, execution_id, flow_id, $3,
       CASE WHEN $5 THEN raw_fields->>'namespace' END,
       CASE WHEN $5 THEN raw_fields->>'instance_tag' END,
       $4
  FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2::uuid
RETURNING event_id`,
		Params: []string{"partition_key", "execution_id", "outcome", "now_ms", "with_namespace"},
		Tables: []string{TCompletion, TExecCore},
	}
	// LeaseEventInsert appends one ff_lease_event row (NOTIFY
	// ff_lease_event at commit), namespace and instance_tag denormalised
	// from the execution when it exists.
	LeaseEventInsert = Statement{
		Name: "lease_event.insert",
		SQL: `INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
SELECT $1::text, NULL, $2, $3, $4::int, c.raw_fields->>'namespace', c.raw_fields->'tags'->>'cairn.instance_id'
  FROM (SELECT 1) AS one
  LEFT JOIN ff_exec_core c ON c.partition_key = $4::smallint AND c.execution_id = $1::uuid`,
		Params: []string{"execution_id", "event_type", "now_ms", "partition_key"},
		Tables: []string{TLeaseEvent, TExecCore},
	}
)

// AttemptDeadlineField is the ff_attempt.raw_fields member holding the
// attempt's own deadline (ms): the claim that starts an attempt stores
// now + policy.timeout_policy.attempt_timeout_ms there (none without a
// timeout), a reclaim carries it over to the reclaiming attempt (the
// Valkey attempt_timeout index keeps its score across a reclaim), and a
// resumed claim clears it (ff_claim_resumed_execution adds no timeout).
// It is fabric's: upstream times attempts out on the lease's expiry.
const AttemptDeadlineField = "attempt_deadline_ms"

// attemptDeadlineExpr reads AttemptDeadlineField of ff_attempt row a.
const attemptDeadlineExpr = `(a.raw_fields->>'` + AttemptDeadlineField + `')::bigint`

// Attempt-timeout reconciler (upstream reconcilers/attempt_timeout, on the
// attempt's own deadline).
var (
	// AttemptTimeoutScan lists (execution_id, attempt_index) of active
	// executions whose current attempt's own deadline
	// (AttemptDeadlineField) passed before now, earliest first. Upstream
	// took an expired lease for a timed-out attempt, which raced the
	// lease-expiry reconciler and expired crashed workers' executions
	// instead of letting them be reclaimed; a lease's expiry is
	// lease_expiry's alone.
	AttemptTimeoutScan = Statement{
		Name: "attempt_timeout.scan",
		SQL: `SELECT a.execution_id::text, a.attempt_index
  FROM ff_attempt a
  JOIN ff_exec_core c ON c.partition_key = a.partition_key AND c.execution_id = a.execution_id
                     AND c.attempt_index = a.attempt_index
 WHERE a.partition_key = $1
   AND a.raw_fields ? '` + AttemptDeadlineField + `'
   AND a.terminal_at_ms IS NULL
   AND ` + attemptDeadlineExpr + ` < $2
   AND c.lifecycle_phase = 'active'
 ORDER BY ` + attemptDeadlineExpr + ` ASC
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TAttempt, TExecCore},
	}
	// AttemptLockDeadline locks an attempt row and reads its own deadline
	// (NULL: the attempt has no timeout).
	AttemptLockDeadline = Statement{
		Name: "attempt.lock_deadline",
		SQL: `SELECT ` + attemptDeadlineExpr + ` FROM ff_attempt a
 WHERE a.partition_key = $1 AND a.execution_id = $2::uuid AND a.attempt_index = $3 FOR UPDATE`,
		Params: []string{"partition_key", "execution_id", "attempt_index"},
		Tables: []string{TAttempt},
	}
	// AttemptInterrupt ends a timed-out attempt.
	AttemptInterrupt = Statement{
		Name: "attempt_timeout.interrupt_attempt",
		SQL: `UPDATE ff_attempt SET outcome = 'interrupted', lease_expires_at_ms = NULL, terminal_at_ms = $4
 WHERE partition_key = $1 AND execution_id = $2::uuid AND attempt_index = $3`,
		Params: []string{"partition_key", "execution_id", "attempt_index", "now_ms"},
		Tables: []string{TAttempt},
	}
	// ExecCoreRetryAfterTimeout makes a timed-out execution with retries
	// left runnable on its next attempt.
	ExecCoreRetryAfterTimeout = Statement{
		Name: "attempt_timeout.retry",
		SQL: `UPDATE ff_exec_core
   SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'eligible_now',
       public_state = 'waiting', attempt_state = 'pending_retry_attempt', attempt_index = attempt_index + 1,
       raw_fields = raw_fields || jsonb_build_object('last_failure_message', 'attempt_timeout', 'last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2::uuid`,
		Params: []string{"partition_key", "execution_id", "now_ms"},
		Tables: []string{TExecCore},
	}
	// ExecCoreExpireAfterTimeout ends a timed-out execution whose retries
	// are exhausted.
	ExecCoreExpireAfterTimeout = Statement{
		Name: "attempt_timeout.expire",
		SQL: `UPDATE ff_exec_core
   SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
       public_state = 'expired', attempt_state = 'attempt_terminal', terminal_at_ms = $3,
       raw_fields = raw_fields || jsonb_build_object('last_failure_message', 'attempt_timeout', 'last_mutation_at', $3::bigint::text,
           'terminal_outcome', 'expired')
 WHERE partition_key = $1 AND execution_id = $2::uuid`,
		Params: []string{"partition_key", "execution_id", "now_ms"},
		Tables: []string{TExecCore},
	}
)

// Lease-expiry reconciler (upstream reconcilers/lease_expiry).
var (
	// LeaseExpiryScan lists (execution_id, attempt_index) of attempts
	// whose lease ran out before now, whatever the execution's phase.
	LeaseExpiryScan = Statement{
		Name: "lease_expiry.scan",
		SQL: `SELECT execution_id::text, attempt_index FROM ff_attempt
 WHERE partition_key = $1 AND lease_expires_at_ms IS NOT NULL AND lease_expires_at_ms < $2
 ORDER BY lease_expires_at_ms ASC
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TAttempt},
	}
	// AttemptReleaseExpired clears an expired lease, marking the attempt
	// reclaimable.
	AttemptReleaseExpired = Statement{
		Name: "lease_expiry.release_attempt",
		SQL: `UPDATE ff_attempt SET lease_expires_at_ms = NULL, outcome = 'lease_expired_reclaimable'
 WHERE partition_key = $1 AND execution_id = $2::uuid AND attempt_index = $3`,
		Params: []string{"partition_key", "execution_id", "attempt_index"},
		Tables: []string{TAttempt},
	}
	// ExecCoreMarkExpired marks an active execution whose lease expired
	// reclaimable, as ff_mark_lease_expired_if_due does on Valkey: it stays
	// active (lease_expired_reclaimable / waiting_for_worker /
	// attempt_interrupted) until a worker of its lane reclaims it with a
	// new "reclaim" attempt (backend/postgres's claimer). Upstream made it
	// runnable on the same attempt, so the next claim reported a "resumed"
	// attempt where Valkey reports a reclaim, and RFC-024's reclaim was
	// refused (spec §9 item 9).
	ExecCoreMarkExpired = Statement{
		Name: "lease_expiry.mark",
		SQL: `UPDATE ff_exec_core
   SET ownership_state = 'lease_expired_reclaimable', blocking_reason = 'waiting_for_worker',
       public_state = 'running', attempt_state = 'attempt_interrupted',
       raw_fields = raw_fields || jsonb_build_object('lease_expired_at', $3::bigint::text, 'last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2::uuid AND attempt_index = $4
   AND lifecycle_phase = 'active' AND ownership_state = 'leased'`,
		Params: []string{"partition_key", "execution_id", "now_ms", "attempt_index"},
		Tables: []string{TExecCore},
	}
)

// Delayed and submitted promotion: the promoters upstream never drives on
// Postgres (spec §9 items 1 and 8).
var (
	// DelayedScan lists execution ids of delayed executions due by now.
	DelayedScan = Statement{
		Name: "promote.delayed_scan",
		SQL: `SELECT execution_id::text FROM ff_exec_core
 WHERE partition_key = $1 AND deadline_at_ms IS NOT NULL AND deadline_at_ms <= $2
   AND lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time'
 ORDER BY deadline_at_ms ASC
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TExecCore},
	}
	// PromoteDelayed makes one due delayed execution eligible; the WHERE
	// re-checks the state, so a row changed since the scan is left alone
	// (0 rows affected).
	PromoteDelayed = Statement{
		Name: "promote.delayed",
		SQL: `UPDATE ff_exec_core
   SET eligibility_state = 'eligible_now', public_state = 'waiting', deadline_at_ms = NULL, blocking_reason = NULL,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2::uuid
   AND lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time'
   AND (deadline_at_ms IS NULL OR deadline_at_ms <= $3)`,
		Params: []string{"partition_key", "execution_id", "now_ms"},
		Tables: []string{TExecCore},
	}
	// SubmittedScan lists execution ids upstream's create left
	// "submitted", oldest first.
	SubmittedScan = Statement{
		Name: "promote.submitted_scan",
		SQL: `SELECT execution_id::text FROM ff_exec_core
 WHERE partition_key = $1 AND lifecycle_phase = 'submitted' AND created_at_ms <= $2
 ORDER BY created_at_ms ASC
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TExecCore},
	}
	// PromoteProbe names, of up to ProbePartitions partitions (a batch
	// call's; a shorter list repeats one of them), those where DelayedScan
	// or SubmittedScan would find something: a read that costs a few
	// milliseconds for 32 partitions, where PromoteBatch's planning alone
	// costs several times that, so a sweep that finds nothing due stays
	// cheap and PromoteBatch runs on the partitions with work only.
	PromoteProbe = Statement{
		Name: "promote.probe",
		SQL: `SELECT partition_key::int8 FROM ff_exec_core
 WHERE partition_key IN (` + probeList + `) AND deadline_at_ms IS NOT NULL AND deadline_at_ms <= $` + probeNow + `
   AND lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time'
UNION
SELECT partition_key::int8 FROM ff_exec_core
 WHERE partition_key IN (` + probeList + `) AND lifecycle_phase = 'submitted' AND created_at_ms <= $` + probeNow,
		Params: probeParams("now_ms"),
		Tables: []string{TExecCore},
	}
	// PromoteBatch is DelayedScan + PromoteDelayed and SubmittedScan +
	// PromoteSubmitted over up to ProbePartitions partitions at once (a
	// batch call's; a shorter list repeats one of them), in one statement:
	// at most limit due delayed executions, earliest due first, and at
	// most limit submitted ones, oldest first, get the very writes of the
	// per-row statements, whose conditions the UPDATEs re-check. It
	// returns (partition_key, 'delayed' | 'submitted') per row promoted.
	// One round trip for a batch of partitions, where the per-row
	// statements took two scans per partition and three round trips a row
	// (BEGIN, UPDATE, COMMIT): a sweep over 256 partitions was 512 round
	// trips before any promotion, seconds on a loaded machine.
	PromoteBatch = Statement{
		Name: "promote.batch",
		SQL: `WITH delayed AS (
  UPDATE ff_exec_core c
     SET eligibility_state = 'eligible_now', public_state = 'waiting', deadline_at_ms = NULL, blocking_reason = NULL,
         raw_fields = c.raw_fields || jsonb_build_object('last_mutation_at', $` + probeNow + `::bigint::text)
    FROM (SELECT partition_key, execution_id FROM ff_exec_core
           WHERE partition_key IN (` + probeList + `) AND deadline_at_ms IS NOT NULL AND deadline_at_ms <= $` + probeNow + `
             AND lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time'
           ORDER BY deadline_at_ms ASC
           LIMIT $` + probeLimit + `) due
   WHERE c.partition_key = due.partition_key AND c.execution_id = due.execution_id
     AND c.partition_key IN (` + probeList + `)
     AND c.lifecycle_phase = 'runnable' AND c.eligibility_state = 'not_eligible_until_time'
     AND (c.deadline_at_ms IS NULL OR c.deadline_at_ms <= $` + probeNow + `)
  RETURNING c.partition_key
), submitted AS (
  UPDATE ff_exec_core c
     SET lifecycle_phase = 'runnable',
         raw_fields = c.raw_fields || jsonb_build_object('last_mutation_at', $` + probeNow + `::bigint::text)
    FROM (SELECT partition_key, execution_id FROM ff_exec_core
           WHERE partition_key IN (` + probeList + `) AND lifecycle_phase = 'submitted' AND created_at_ms <= $` + probeNow + `
           ORDER BY created_at_ms ASC
           LIMIT $` + probeLimit + `) sub
   WHERE c.partition_key = sub.partition_key AND c.execution_id = sub.execution_id
     AND c.partition_key IN (` + probeList + `) AND c.lifecycle_phase = 'submitted'
  RETURNING c.partition_key
)
SELECT partition_key::int8, 'delayed' FROM delayed
UNION ALL
SELECT partition_key::int8, 'submitted' FROM submitted`,
		Params: probeParams("now_ms", "limit"),
		Tables: []string{TExecCore},
	}
	// PromoteSubmitted makes one submitted execution runnable (eligibility
	// and public state as create wrote them).
	PromoteSubmitted = Statement{
		Name: "promote.submitted",
		SQL: `UPDATE ff_exec_core
   SET lifecycle_phase = 'runnable',
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2::uuid AND lifecycle_phase = 'submitted'`,
		Params: []string{"partition_key", "execution_id", "now_ms"},
		Tables: []string{TExecCore},
	}
)

// Suspension-timeout reconciler (upstream reconcilers/suspension_timeout).
var (
	// SuspensionTimeoutScan lists (execution_id, timeout_behavior) of
	// suspensions whose timeout passed; behavior NULL reads as "fail".
	SuspensionTimeoutScan = Statement{
		Name: "suspension_timeout.scan",
		SQL: `SELECT execution_id::text, COALESCE(timeout_behavior, 'fail') FROM ff_suspension_current
 WHERE partition_key = $1 AND timeout_at_ms IS NOT NULL AND timeout_at_ms < $2
 ORDER BY timeout_at_ms ASC
 LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TSuspension},
	}
	// SuspensionLock locks a suspension row and reads its timeout, its
	// behavior and the execution's lifecycle phase ('' when the execution
	// row is gone).
	SuspensionLock = Statement{
		Name: "suspension_timeout.lock",
		SQL: `SELECT s.timeout_at_ms, COALESCE(s.timeout_behavior, 'fail'), COALESCE(c.lifecycle_phase, '')
  FROM ff_suspension_current s
  LEFT JOIN ff_exec_core c ON c.partition_key = s.partition_key AND c.execution_id = s.execution_id
 WHERE s.partition_key = $1 AND s.execution_id = $2::uuid
   FOR UPDATE OF s`,
		Params: []string{"partition_key", "execution_id"},
		Tables: []string{TSuspension, TExecCore},
	}
	// SuspensionAutoResume records the timeout signal in member_map and
	// clears the timeout (behavior auto_resume_with_timeout_signal).
	SuspensionAutoResume = Statement{
		Name: "suspension_timeout.auto_resume",
		SQL: `UPDATE ff_suspension_current
   SET member_map = jsonb_set(member_map, '{__timeout__}',
         COALESCE(member_map->'__timeout__', '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
           'signal_name', 'timeout', 'payload', NULL, 'delivered_at_ms', $3::bigint, 'source', 'suspension_timeout'))),
       timeout_at_ms = NULL
 WHERE partition_key = $1 AND execution_id = $2::uuid`,
		Params: []string{"partition_key", "execution_id", "now_ms"},
		Tables: []string{TSuspension},
	}
	// SuspensionClearTimeout clears the timeout of a suspension whose
	// execution is no longer suspended (fabric's fix of spec §9 item 6:
	// upstream would terminate an execution that already resumed).
	SuspensionClearTimeout = Statement{
		Name: "suspension_timeout.clear",
		SQL: `UPDATE ff_suspension_current SET timeout_at_ms = NULL
 WHERE partition_key = $1 AND execution_id = $2::uuid`,
		Params: []string{"partition_key", "execution_id"},
		Tables: []string{TSuspension},
	}
	// ExecCoreTerminateSuspended ends a suspended execution whose
	// suspension timed out.
	ExecCoreTerminateSuspended = Statement{
		Name: "suspension_timeout.terminate",
		SQL: `UPDATE ff_exec_core
   SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
       public_state = $4, attempt_state = 'attempt_terminal', terminal_at_ms = $3, cancellation_reason = $5,
       raw_fields = raw_fields || jsonb_build_object('last_failure_message', 'suspension_timeout',
           'last_mutation_at', $3::bigint::text, 'terminal_outcome', $4::text)
 WHERE partition_key = $1 AND execution_id = $2::uuid AND lifecycle_phase = 'suspended'`,
		Params: []string{"partition_key", "execution_id", "now_ms", "outcome", "cancellation_reason"},
		Tables: []string{TExecCore},
	}
	// SuspensionDelete removes the suspension row.
	SuspensionDelete = Statement{
		Name:   "suspension_timeout.delete",
		SQL:    `DELETE FROM ff_suspension_current WHERE partition_key = $1 AND execution_id = $2::uuid`,
		Params: []string{"partition_key", "execution_id"},
		Tables: []string{TSuspension},
	}
)

// Retention (upstream trim_retention, which nothing drives on Postgres).
var (
	// RetentionScan lists execution ids of terminal executions that ended
	// at or before cutoff, oldest first.
	RetentionScan = Statement{
		Name: "retention.scan",
		SQL: `SELECT execution_id::text FROM ff_exec_core
 WHERE partition_key = $1 AND lifecycle_phase = 'terminal' AND terminal_at_ms <= $2
 ORDER BY terminal_at_ms ASC
 LIMIT $3`,
		Params: []string{"partition_key", "cutoff_ms", "limit"},
		Tables: []string{TExecCore},
	}
	// RetentionDeleteExecCore deletes the execution row when it is still
	// terminal and old enough; 0 rows affected means it changed (replay):
	// the transaction must then roll back its child deletes.
	RetentionDeleteExecCore = Statement{
		Name: "retention.delete_exec_core",
		SQL: `DELETE FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2::uuid
   AND lifecycle_phase = 'terminal' AND terminal_at_ms <= $3`,
		Params: []string{"partition_key", "execution_id", "cutoff_ms"},
		Tables: []string{TExecCore},
	}
)

// retentionChildren are the per-execution tables retention empties:
// uuid-keyed tables by (partition_key, execution_id), the text-keyed
// outboxes by the bare uuid text.
var retentionChildren = []struct {
	table string
	text  bool
}{
	{TAttempt, false}, {TClaimGrant, false}, {TCompletion, false}, {TStreamFrame, false},
	{TStreamMeta, false}, {TStreamSummary, false}, {TSuspension, false}, {TWaitpoint, false},
	{TLeaseEvent, true}, {TSignalEvent, true}, {TOperatorEvent, true},
}

// RetentionDeleteChildren are the child-row deletes of one execution, each
// with params (partition_key, execution_id); run them before
// RetentionDeleteExecCore in one transaction.
var RetentionDeleteChildren = func() []Statement {
	out := make([]Statement, 0, len(retentionChildren))
	for _, c := range retentionChildren {
		sql := `DELETE FROM ` + c.table + ` WHERE partition_key = $1 AND execution_id = $2::uuid`
		if c.text {
			sql = `DELETE FROM ` + c.table + ` WHERE partition_key = $1::int AND execution_id = $2::text`
		}
		out = append(out, Statement{
			Name: "retention.delete_" + strings.TrimPrefix(c.table, "ff_"), SQL: sql,
			Params: []string{"partition_key", "execution_id"}, Tables: []string{c.table},
		})
	}
	return out
}()

// All is every statement of the catalog.
var All = append(append([]Statement{
	ExecCoreLock, AttemptLockLease, CompletionInsert, LeaseEventInsert,
	AttemptTimeoutScan, AttemptLockDeadline, AttemptInterrupt, ExecCoreRetryAfterTimeout, ExecCoreExpireAfterTimeout,
	LeaseExpiryScan, AttemptReleaseExpired, ExecCoreMarkExpired,
	DelayedScan, PromoteDelayed, SubmittedScan, PromoteSubmitted, PromoteProbe, PromoteBatch,
	SuspensionTimeoutScan, SuspensionLock, SuspensionAutoResume, SuspensionClearTimeout,
	ExecCoreTerminateSuspended, SuspensionDelete,
	RetentionScan, RetentionDeleteExecCore,
}, RetentionDeleteChildren...), append(append(flowStatements, maintStatements...), periodicStatements...)...)

// ProbePartitions is how many partitions one batch statement
// (PromoteProbe, PromoteBatch, DependencyProbe) names: its first ProbePartitions
// parameters, each a "partition_key" the host checks as any other (the
// scanned partition, or one of the batch's).
const ProbePartitions = 32

// probeNow is the number of a probe's first parameter after its
// partition keys.
var probeNow = strconv.Itoa(ProbePartitions + 1)

// probeLimit is the number of a batch statement's parameter after
// probeNow.
var probeLimit = strconv.Itoa(ProbePartitions + 2)

// probeList is a probe's partition list: "$1, $2, …, $ProbePartitions".
var probeList = func() string {
	ps := make([]string, ProbePartitions)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(i+1)
	}
	return strings.Join(ps, ", ")
}()

// probeParams names a probe's parameters: ProbePartitions partition keys,
// then rest.
func probeParams(rest ...string) []string {
	ps := make([]string, 0, ProbePartitions+len(rest))
	for range ProbePartitions {
		ps = append(ps, "partition_key")
	}
	return append(ps, rest...)
}
