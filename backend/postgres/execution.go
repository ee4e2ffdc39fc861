package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
)

// Lease event types written to ff_lease_event.
const (
	LeaseEventAcquired  = "acquired"
	LeaseEventRenewed   = "renewed"
	LeaseEventExpired   = "expired"
	LeaseEventReclaimed = "reclaimed"
	LeaseEventRevoked   = "revoked"
)

// emitLeaseEvent appends one ff_lease_event row in tx (NOTIFY
// ff_lease_event at commit). namespace and instance_tag are denormalised
// from the execution row when it exists (the value of its
// cairn.instance_id tag), NULL otherwise; the row is written either way.
// A release's reason ("" none) goes beside it into fabric_lease_reason,
// where the console's lease history reads it.
func emitLeaseEvent(ctx context.Context, tx pgx.Tx, k execKey, eventType, reason string, now int64) error {
	if _, err := tx.Exec(ctx, pgsql.LeaseEventInsert.SQL, k.id(), eventType, now, k.part); err != nil {
		return fmt.Errorf("lease event %s: %w", eventType, err)
	}
	if reason == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, sqlLeaseReasonInsert, reason); err != nil {
		return fmt.Errorf("lease event %s reason %s: %w", eventType, reason, err)
	}
	return nil
}

// sqlLeaseReasonInsert notes the reason of the ff_lease_event row the
// session inserted last.
const sqlLeaseReasonInsert = `INSERT INTO fabric_lease_reason (event_id, reason)
VALUES (currval(pg_get_serial_sequence('ff_lease_event', 'event_id')), $1)`

// emitCompletion appends one ff_completion_event row for the execution in
// tx (NOTIFY ff_completion at commit). withNamespace copies the
// execution's namespace / instance_tag raw fields as upstream's typed
// complete does; every other upstream producer writes NULL.
func emitCompletion(ctx context.Context, tx pgx.Tx, k execKey, outcome string, now int64, withNamespace bool) (int64, error) {
	var id int64
	if err := tx.QueryRow(ctx, pgsql.CompletionInsert.SQL, k.part, k.id(), outcome, now, withNamespace).Scan(&id); err != nil {
		return 0, fmt.Errorf("completion event %s: %w", outcome, err)
	}
	return id, nil
}

// CreateExecutionParams are the inputs of CreateExecution: the backend
// contract's (one type for both drivers). The execution's required
// capabilities are read from PolicyJSON's
// routing_requirements.required_capabilities, as FlowFabric's function
// reads them on Valkey; FlowKind is the contract's and unused here (the
// driver creates the flow first).
type CreateExecutionParams = backend.CreateExecutionParams

// CreateExecutionResult is the outcome of CreateExecution.
type CreateExecutionResult struct {
	// Duplicate reports that the execution already existed (nothing was
	// written).
	Duplicate bool
	// PublicState is the new execution's public state ("waiting" or
	// "delayed").
	PublicState string
}

// CreateExecution inserts the ff_exec_core row (idempotent on the id) and
// registers the lane, in one statement (one round trip).
//
// Unlike upstream, whose create writes lifecycle_phase "submitted" that no
// code ever promotes (spec §9 item 1), the row is created "runnable" as on
// Valkey, so it is claimable at once; PromoteSubmitted repairs rows written
// the upstream way.
//
//	ff_exec_core: runnable / unowned / eligible_now (or not_eligible_until_time
//	  with deadline_at_ms = DelayUntil) / waiting (delayed) / pending, attempt_index 0
//	ff_lane_registry: (lane, now, 'create_execution') ON CONFLICT DO NOTHING
func (c *Client) CreateExecution(ctx context.Context, p *CreateExecutionParams) (*CreateExecutionResult, error) {
	return c.createExecution(ctx, c.pool, p)
}

// createDB is where a create runs its statements: the pool (each
// statement its own transaction), or a caller's pgx.Tx
// (Driver.CreateExecutionTx).
type createDB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// createExecution is CreateExecution on db. In a caller's transaction it
// changes no session setting (no generic-plan or quiet-NOTIFY SET, which
// would outlive the statement there) and leaves the eligible NOTIFY to
// the row's trigger, which Postgres delivers when the caller commits.
func (c *Client) createExecution(ctx context.Context, db createDB, p *CreateExecutionParams) (*CreateExecutionResult, error) {
	_, callerTx := db.(pgx.Tx)
	// A past deadline is the driver's refusal: here the deadline
	// scanner expires it (ValidateCreateExecution).
	if err := backend.ValidateCreateExecution(p, c.maxPayload, 0); err != nil {
		return nil, err
	}
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("create execution %s: %w", p.ExecutionID, err)
	}
	var policy any
	if p.PolicyJSON != "" {
		if !json.Valid([]byte(p.PolicyJSON)) {
			return nil, fmt.Errorf("create execution %s: %w", p.ExecutionID, CodeInvalidPolicyJSON)
		}
		policy = p.PolicyJSON
	}
	now := c.nowMs()
	tags := p.Tags
	if tags == nil {
		tags = map[string]string{}
	}
	raw := map[string]any{
		"namespace": p.Namespace, "execution_kind": p.ExecutionKind, "creator_identity": p.CreatorIdentity,
		"last_mutation_at": strconv.FormatInt(now, 10), "total_attempt_count": "0", "tags": tags,
	}
	if p.IdempotencyKey != "" {
		raw["idempotency_key"] = p.IdempotencyKey
	}
	eligibility, public := model.EligibleNow, model.PublicWaiting
	var deadline *int64
	if p.ExecutionDeadlineAt > 0 {
		deadline = &p.ExecutionDeadlineAt
	}
	if p.DelayUntil > 0 {
		eligibility, public = model.EligibleNotUntilTime, model.PublicDelayed
		deadline = &p.DelayUntil
		raw["delay_until"] = strconv.FormatInt(p.DelayUntil, 10)
	}
	var flow any
	if !p.FlowID.IsZero() {
		flow = [16]byte(p.FlowID)
	}
	caps := requiredCapabilities(p.PolicyJSON)
	if caps == nil {
		caps = []string{}
	}
	res := &CreateExecutionResult{PublicState: public}
	// One statement (one round trip, its own transaction; model/pgsql holds
	// the one INSERT of an execution, which pg_periodic fires too): the row and,
	// when it is new, the lane's registration.
	args := []any{k.part, [16]byte(k.uuid), flow, p.LaneID, caps, eligibility, public,
		p.Priority, now, deadline, p.Payload, policy, raw}
	// An execution eligible at once notifies idle workers; a create soon
	// after another on the same partition and lane runs quiet and leaves
	// one NOTIFY to follow it (eligible_notes.go).
	quiet := !callerTx && eligibility == model.EligibleNow && !c.eligible.inline(k.part, p.LaneID, c.now())
	var inserted int64
	// An INSERT names no partition to prune (rows are routed as they are
	// written), so its generic plan is safe with the partition as a
	// parameter: it is kept and not planned again (hotplan.go), and its
	// literal form inserts into the partition's child. The batch
	// is one implicit transaction: the settings its first statement makes
	// (generic plans, the quieted NOTIFY) end with it.
	var set string
	switch {
	case callerTx:
	case !c.hot.off && quiet:
		set = sqlGenericPlansQuiet
	case !c.hot.off:
		set = sqlGenericPlans
	case quiet:
		set = sqlQuietEligible
	}
	text, _ := c.hot.text(sqlCreate, k.part)
	if set == "" {
		err = db.QueryRow(ctx, text, args...).Scan(&inserted)
	} else {
		b := &pgx.Batch{}
		b.Queue(set)
		b.Queue(text, args...)
		br := db.SendBatch(ctx, b)
		inserted, err = readGenericBatch(br, func() (int64, error) {
			var n int64
			return n, br.QueryRow().Scan(&n)
		})
	}
	if quiet && err == nil && inserted > 0 {
		c.eligible.quietDone(k.part, p.LaneID, c.notifyEligible)
	}
	err = notMigrated(err)
	res.Duplicate = err == nil && inserted == 0
	if res.Duplicate && p.IdempotencyKey == "" {
		err = c.samePayload(ctx, db, k, p.Payload)
	}
	if err != nil {
		return nil, fmt.Errorf("create execution %s: %w", p.ExecutionID, err)
	}
	return res, nil
}

// samePayload answers CodeExecutionConflict when the stored execution k
// has a payload other than payload (a re-sent pre-minted id is a retry
// only with the payload it was created with; no payload and an empty one
// are the same, as on Valkey).
func (c *Client) samePayload(ctx context.Context, db createDB, k execKey, payload []byte) error {
	var same bool
	err := db.QueryRow(ctx, `SELECT coalesce(payload, ''::bytea) = $3::bytea FROM ff_exec_core
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), append([]byte{}, payload...)).Scan(&same)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // deleted since (retention): nothing to conflict with
	case err != nil:
		return fmt.Errorf("compare payload: %w", err)
	case !same:
		return fmt.Errorf("%w: payload differs from the existing execution", CodeExecutionConflict)
	}
	return nil
}

// LeaseFence identifies the lease a worker holds. Postgres stores no lease
// or attempt id: the fence is (AttemptIndex, LeaseEpoch); LeaseID and
// AttemptID are upstream's synthetic forms "pg:<uuid>:<attempt>:<epoch>" and
// "pg:<uuid>:<attempt>", informational only. It is backend.Fence, the one
// fence type of both drivers.
type LeaseFence = backend.Fence

func newFence(k execKey, attempt int, epoch uint64) LeaseFence {
	return LeaseFence{
		LeaseID:      fmt.Sprintf("pg:%s:%d:%d", k.id(), attempt, epoch),
		LeaseEpoch:   epoch,
		AttemptID:    fmt.Sprintf("pg:%s:%d", k.id(), attempt),
		AttemptIndex: attempt,
	}
}

// ClaimResult is the lease a claim acquired.
type ClaimResult struct {
	ExecutionID  model.ExecutionID
	LeaseID      string
	LeaseEpoch   uint64
	ExpiresAt    int64
	AttemptID    string
	AttemptIndex int
	// AttemptType is initial, retry, resumed (a delayed or otherwise
	// interrupted attempt continuing under a new lease epoch) or reclaim
	// (Reclaim: a new attempt taking over an expired lease).
	AttemptType string
	// LaneID, Kind, Namespace, Payload and FlowID describe the claimed
	// execution (read in the claim's own round trip), so a worker needs no
	// second read.
	LaneID, Kind, Namespace string
	Payload                 []byte
	FlowID                  string
}

// Fence returns the fence of the acquired lease.
func (r *ClaimResult) Fence() LeaseFence {
	return LeaseFence{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch, AttemptID: r.AttemptID, AttemptIndex: r.AttemptIndex}
}

// ClaimExecutionParams are the inputs of ClaimExecution (defined once in
// package backend).
type ClaimExecutionParams = backend.ClaimExecutionParams

// ClaimExecution claims one named execution (runnable, eligible_now) under
// a new lease. See ClaimForWorker for what it writes.
func (c *Client) ClaimExecution(ctx context.Context, p *ClaimExecutionParams) (*ClaimResult, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("claim execution %s: %w", p.ExecutionID, err)
	}
	if p.LeaseTTLMs <= 0 {
		return nil, fmt.Errorf("claim execution %s: %w: lease_ttl_ms must be > 0", p.ExecutionID, CodeInvalidInput)
	}
	var res *ClaimResult
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		var phase, elig, attemptState string
		var caps []string
		var idx int
		err := tx.QueryRow(ctx, `SELECT lifecycle_phase, eligibility_state, attempt_state, required_capabilities, attempt_index
  FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
			k.part, [16]byte(k.uuid)).Scan(&phase, &elig, &attemptState, &caps, &idx)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeExecutionNotFound
		}
		if err != nil {
			return err
		}
		if phase != model.PhaseRunnable || elig != model.EligibleNow {
			return fmt.Errorf("%w: %s/%s", CodeExecutionNotEligible, phase, elig)
		}
		if !subset(caps, p.Capabilities) {
			return CodeCapabilityMismatch
		}
		res, err = c.grantLease(ctx, tx, sqlGrantByID, p.WorkerID, p.WorkerInstanceID, p.LeaseTTLMs, [16]byte(k.uuid), k.part)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim execution %s: %w", p.ExecutionID, err)
	}
	return res, nil
}

func subset(need, have []string) bool {
	set := make(map[string]bool, len(have))
	for _, h := range have {
		set[h] = true
	}
	for _, n := range need {
		if !set[n] {
			return false
		}
	}
	return true
}

// ClaimForWorkerParams are the inputs of ClaimForWorker: the driver
// contract's ClaimNextParams, defined once in package backend.
type ClaimForWorkerParams = backend.ClaimNextParams

// ClaimForWorker claims the best eligible execution of a lane: highest
// priority, then oldest (first on the lane's solo partition, then on all
// partitions, unless Partitions is given), skipping rows other claimers hold
// (SELECT … FOR UPDATE SKIP LOCKED), among those whose required
// capabilities the worker offers. Nothing to claim yields
// CodeNoEligibleExecution.
//
//	ff_attempt: upsert (partition, execution, attempt_index): new row lease_epoch 1,
//	  existing row lease_epoch+1 and outcome NULL; worker ids, lease_expires_at_ms =
//	  now+ttl, started_at_ms = now
//	ff_exec_core: active / leased / not_applicable / running / running_attempt,
//	  started_at_ms = COALESCE(started_at_ms, now), raw_fields.total_attempt_count
//	ff_lease_event: acquired
func (c *Client) ClaimForWorker(ctx context.Context, p *ClaimForWorkerParams) (*ClaimResult, error) {
	res, err := c.ClaimForWorkerN(ctx, p, 1)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// ClaimForWorkerN is ClaimForWorker for up to n executions (n < 1 counts
// as 1): on one partition (the lane's solo partition, or Partitions with
// one entry) they are picked, locked and leased in one statement
// (sqlGrantNext, LIMIT n), each with its own attempt, lease epoch and
// lease event; a pass over several partitions claims one. It returns the
// leases of the first pass that found any; CodeNoEligibleExecution when
// none did.
func (c *Client) ClaimForWorkerN(ctx context.Context, p *ClaimForWorkerParams, n int) ([]*ClaimResult, error) {
	if p.LeaseTTLMs <= 0 || p.LaneID == "" {
		return nil, fmt.Errorf("claim for worker: %w: lane and lease_ttl_ms > 0 are required", CodeInvalidInput)
	}
	n = max(n, 1)
	caps := p.Capabilities
	if caps == nil {
		caps = []string{}
	}
	// Solo executions of a lane all live on the lane's partition, so it is
	// tried first (a pruned, indexed query); then every partition, which
	// also finds flow members of the lane.
	passes := [][]int16{{int16(c.parts.SoloPartition(p.LaneID).Index)}, nil}
	if len(p.Partitions) > 0 {
		var only []int16
		for _, pt := range p.Partitions {
			only = append(only, int16(pt))
		}
		passes = [][]int16{only}
	}
	var res []*ClaimResult
	var err error
	for _, parts := range passes {
		if res, err = c.claimPass(ctx, p, parts, caps, n); !errors.Is(err, CodeNoEligibleExecution) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("claim for worker (lane %s): %w", p.LaneID, err)
	}
	return res, nil
}

func (c *Client) claimPass(ctx context.Context, p *ClaimForWorkerParams, parts []int16, caps []string, n int) ([]*ClaimResult, error) {
	if len(parts) == 1 {
		// One partition: one statement, its own transaction.
		res, err := c.grantNext(ctx, p, parts[0], caps, n)
		return res, notMigrated(err)
	}
	// Several partitions: the row is picked and locked first, then claimed
	// by id, so that the claim's writes name their partition (a statement
	// that joins the pick to the partitioned tables would plan all 256
	// children of each).
	var res *ClaimResult
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		// Several partitions are read under a generic plan: planning the
		// pick over 256 children took 100-230 ms per claim under the demo,
		// while the kept generic plan costs an index probe per child (and
		// its locks) per execution. SET LOCAL ends with the transaction.
		// (Sorts stay allowed here: over several partition keys the claim
		// index gives no order, and planning the pick with them off took
		// 8-17 s.)
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
			return err
		}
		// One text per partition shape, so the planner prunes partitions
		// (a "$1 IS NULL OR partition_key = ANY($1)" predicate would make it
		// probe all 256 children on every claim).
		where, pk := "$1::smallint IS NULL", any(nil)
		if len(parts) > 0 {
			where, pk = "partition_key = ANY($1::smallint[])", parts
		}
		var part int16
		var uuid [16]byte
		err := tx.QueryRow(ctx, `
SELECT partition_key, execution_id
  FROM ff_exec_core
 WHERE `+where+`
   AND lane_id = $2
   AND lifecycle_phase = 'runnable'
   AND eligibility_state = 'eligible_now'
   AND required_capabilities <@ $3::text[]
 ORDER BY priority DESC, created_at_ms ASC
 LIMIT 1
 FOR UPDATE SKIP LOCKED`, pk, p.LaneID, caps).Scan(&part, &uuid)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeNoEligibleExecution
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
			return err
		}
		res, err = c.grantLease(ctx, tx, sqlGrantByID, p.WorkerID, p.WorkerInstanceID, p.LeaseTTLMs, uuid, part)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []*ClaimResult{res}, nil
}

// Claim statements: grantSQL around the row that is claimed.
var (
	// sqlGrantByID claims execution $5 on partition $6, which the
	// caller's transaction locked.
	sqlGrantByID = grantSQL(`
  SELECT partition_key, execution_id, attempt_index, attempt_state, policy
    FROM ff_exec_core WHERE partition_key = $6::smallint AND execution_id = $5`, "$6")
	// sqlGrantNext claims the $7 best eligible executions of lane $5 on
	// partition $8 whose required capabilities $6 covers (highest priority, then
	// oldest), skipping rows other claimers hold: a worker with several
	// free slots claims for all of them in one statement.
	sqlGrantNext = newHotStmt(grantSQL(`
  SELECT partition_key, execution_id, attempt_index, attempt_state, policy
    FROM ff_exec_core
   WHERE partition_key = $8::smallint
     AND lane_id = $5
     AND lifecycle_phase = 'runnable'
     AND eligibility_state = 'eligible_now'
     AND required_capabilities <@ $6::text[]
   ORDER BY priority DESC, created_at_ms ASC
   LIMIT $7
   FOR UPDATE SKIP LOCKED`, "$8"), 8, "ff_exec_core", "ff_attempt")

	// sqlCreate is pgsql.ExecCreate, whose literal form (hotplan.go)
	// inserts into the partition's child of ff_exec_core; the partition
	// stays its first parameter.
	sqlCreate = newHotStmt(pgsql.ExecCreate.SQL, 0, "ff_exec_core")
)

// grantSQL is one statement that claims the row cand selects on
// partition part, a parameter (and locks, or that is already locked),
// with worker $1, instance $2, lease expiry $3 and now $4. The writes
// repeat the partition so that planning prunes to its children:
//
//	ff_attempt: upsert (partition, execution, attempt_index): new row lease_epoch 1
//	  and, with policy.timeout_policy.attempt_timeout_ms, the attempt's deadline
//	  (raw_fields.attempt_deadline_ms = now + timeout); existing row (a resumed
//	  attempt) lease_epoch+1, outcome NULL and no deadline, as
//	  ff_claim_resumed_execution adds none; worker ids, lease_expires_at_ms,
//	  started_at_ms = now
//	ff_exec_core: active / leased / not_applicable / running / running_attempt,
//	  started_at_ms = COALESCE(started_at_ms, now), raw_fields.total_attempt_count+1
//	ff_lease_event: acquired (namespace, instance_tag from raw_fields);
//	  fabric_lease_reason claim_resumed for a resumed attempt, as
//	  ff_claim_resumed_execution writes into a Valkey lease history
//
// cand's columns are partition_key, execution_id, attempt_index,
// attempt_state and policy. It returns the claimed row's execution, attempt, epoch and job fields;
// no row when cand found none.
func grantSQL(cand, part string) string {
	return `
WITH cand AS (` + cand + `),
att AS (
  INSERT INTO ff_attempt AS a (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
                               lease_epoch, lease_expires_at_ms, started_at_ms, raw_fields)
  SELECT partition_key, execution_id, attempt_index, $1, $2, 1, $3, $4,
         CASE WHEN ` + attemptTimeoutExpr + ` > 0
              THEN jsonb_build_object('` + pgsql.AttemptDeadlineField + `', $4::bigint + ` + attemptTimeoutExpr + `)
              ELSE '{}'::jsonb END
    FROM cand
  ON CONFLICT (partition_key, execution_id, attempt_index) DO UPDATE
     SET worker_id = EXCLUDED.worker_id, worker_instance_id = EXCLUDED.worker_instance_id,
         lease_epoch = a.lease_epoch + 1, lease_expires_at_ms = EXCLUDED.lease_expires_at_ms,
         started_at_ms = EXCLUDED.started_at_ms, outcome = NULL,
         raw_fields = a.raw_fields - '` + pgsql.AttemptDeadlineField + `'
  RETURNING partition_key, execution_id, lease_epoch),
core AS (
  UPDATE ff_exec_core e
     SET lifecycle_phase = 'active', ownership_state = 'leased', eligibility_state = 'not_applicable',
         public_state = 'running', attempt_state = 'running_attempt', blocking_reason = NULL,
         started_at_ms = COALESCE(e.started_at_ms, $4),
         raw_fields = e.raw_fields || jsonb_build_object(
             'last_mutation_at', $4::bigint::text,
             'current_worker_instance_id', $2::text,
             'total_attempt_count', (COALESCE((e.raw_fields->>'total_attempt_count')::bigint, 0) + 1)::text)
    FROM cand
   WHERE e.partition_key = ` + part + `::smallint AND e.partition_key = cand.partition_key AND e.execution_id = cand.execution_id
  RETURNING e.partition_key, e.execution_id, e.lane_id, e.raw_fields, e.payload, e.flow_id),
ev AS (
  INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
  SELECT execution_id::text, NULL, 'acquired', $4, partition_key::int, raw_fields->>'namespace',
         raw_fields->'tags'->>'cairn.instance_id'
    FROM core
  RETURNING event_id, execution_id, partition_key),
note AS (
  INSERT INTO fabric_lease_reason (event_id, reason)
  SELECT ev.event_id, 'claim_resumed'
    FROM ev JOIN att ON att.partition_key = ev.partition_key AND att.execution_id::text = ev.execution_id
   WHERE att.lease_epoch > 1)
SELECT core.partition_key, core.execution_id, cand.attempt_index, cand.attempt_state, att.lease_epoch, core.lane_id,
       COALESCE(core.raw_fields->>'execution_kind', ''), COALESCE(core.raw_fields->>'namespace', ''), core.payload,
       COALESCE(core.flow_id::text, '')
  FROM core
  JOIN cand ON cand.partition_key = core.partition_key AND cand.execution_id = core.execution_id
  JOIN att ON att.partition_key = core.partition_key AND att.execution_id = core.execution_id`
}

// attemptTimeoutExpr reads cand.policy's timeout_policy.attempt_timeout_ms
// (NULL when absent or not a plain non-negative integer; 0 is no timeout,
// as ff_claim_execution reads it).
const attemptTimeoutExpr = `(CASE WHEN jsonb_typeof(cand.policy->'timeout_policy'->'attempt_timeout_ms') = 'number'
             AND (cand.policy->'timeout_policy'->>'attempt_timeout_ms') ~ '^[0-9]{1,15}$'
            THEN (cand.policy->'timeout_policy'->>'attempt_timeout_ms')::bigint END)`

// grantLease runs a grantSQL statement on q (the pool: the statement is
// its own transaction; or the transaction that locked the row) and
// returns the lease it granted; CodeNoEligibleExecution when it claimed
// nothing.
func (c *Client) grantLease(ctx context.Context, q Querier, stmt, worker, instance string, ttl int64, cand ...any) (*ClaimResult, error) {
	now := c.nowMs()
	expires := now + ttl
	rows, err := q.Query(ctx, stmt, append([]any{worker, instance, expires, now}, cand...)...)
	if err != nil {
		return nil, err
	}
	res, err := scanLeases(rows, expires)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// grantNext claims up to n executions of p's lane on partition part with
// sqlGrantNext: in its literal-partition form under a generic plan
// (hotplan.go) when the partition has one, else in its parameter form.
func (c *Client) grantNext(ctx context.Context, p *ClaimForWorkerParams, part int16, caps []string, n int) ([]*ClaimResult, error) {
	text, literal := c.hot.text(sqlGrantNext, part)
	now := c.nowMs()
	expires := now + p.LeaseTTLMs
	// The claim runs without sorts (hotplan.go): its partial index is read
	// in order, whatever a fresh partition's statistics say.
	set, args := sqlClaimPlans, []any{p.WorkerID, p.WorkerInstanceID, expires, now, p.LaneID, caps, n}
	if !literal {
		set, args = sqlClaimPlansNoGeneric, append(args, part)
	}
	b := &pgx.Batch{}
	b.Queue(set)
	b.Queue(text, args...)
	br := c.pool.SendBatch(ctx, b)
	out, err := readGenericBatch(br, func() ([]*ClaimResult, error) {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		return scanLeases(rows, expires)
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, CodeNoEligibleExecution
	}
	return out, nil
}

// scanLeases reads the leases a grantSQL statement granted, in the order
// it returned them, and closes rows; CodeNoEligibleExecution when none.
func scanLeases(rows pgx.Rows, expires int64) ([]*ClaimResult, error) {
	defer rows.Close()
	var out []*ClaimResult
	for rows.Next() {
		var k execKey
		var uuid [16]byte
		var idx int
		var attemptState, lane, kind, ns, flow string
		var epoch int64
		var payload []byte
		if err := rows.Scan(&k.part, &uuid, &idx, &attemptState, &epoch, &lane, &kind, &ns, &payload, &flow); err != nil {
			rows.Close()
			return nil, err
		}
		k.uuid = uuid
		typ := "initial"
		switch {
		case attemptState == model.AttemptPendingRetry:
			typ = "retry"
		case epoch > 1:
			typ = "resumed"
		}
		f := newFence(k, idx, uint64(epoch))
		out = append(out, &ClaimResult{ExecutionID: k.execID(), LeaseID: f.LeaseID, LeaseEpoch: f.LeaseEpoch, ExpiresAt: expires,
			AttemptID: f.AttemptID, AttemptIndex: idx, AttemptType: typ,
			LaneID: lane, Kind: kind, Namespace: ns, Payload: payload, FlowID: flow})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, CodeNoEligibleExecution
	}
	return out, nil
}

// fencedRow is the exec_core and attempt state a fenced operation read
// under lock.
type fencedRow struct {
	policy []byte
	raw    map[string]any
}

// Fence lock statements: the execution row, then the fenced attempt (the
// lock order of every fenced operation). checkFence runs them one by one;
// CompleteExecution locks many at once in the same order (complete_group.go).
const (
	sqlLockCoreFenced = `SELECT lifecycle_phase, attempt_index, policy, raw_fields FROM ff_exec_core
 WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`
	sqlLockAttemptFenced = `SELECT lease_epoch, lease_expires_at_ms FROM ff_attempt
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 FOR UPDATE`
)

// checkFence locks the execution and the fenced attempt and validates the
// fence: the execution is active on fence.AttemptIndex, the attempt's
// lease_epoch equals fence.LeaseEpoch and its lease has not expired.
// Upstream fences on the epoch alone (spec §9 item 5); fabric also
// refuses stale attempts and expired leases, as the Valkey library does.
func (c *Client) checkFence(ctx context.Context, tx pgx.Tx, k execKey, f LeaseFence, now int64) (*fencedRow, error) {
	var phase string
	var idx int
	row := &fencedRow{}
	err := tx.QueryRow(ctx, sqlLockCoreFenced, k.part, [16]byte(k.uuid)).Scan(&phase, &idx, &row.policy, &row.raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, CodeExecutionNotFound
	}
	if err != nil {
		return nil, err
	}
	var epoch int64
	var expires *int64
	err = tx.QueryRow(ctx, sqlLockAttemptFenced, k.part, [16]byte(k.uuid), f.AttemptIndex).Scan(&epoch, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: no attempt %d", CodeStaleLease, f.AttemptIndex)
	}
	if err != nil {
		return nil, err
	}
	if err := fenceError(f, phase, idx, epoch, expires, now); err != nil {
		return nil, err
	}
	return row, nil
}

// fenceError validates fence f against the locked execution (phase,
// attempt index) and attempt (epoch, lease expiry) rows: nil when the
// fence holds, else the logical error.
func fenceError(f LeaseFence, phase string, idx int, epoch int64, expires *int64, now int64) error {
	if uint64(epoch) != f.LeaseEpoch || idx != f.AttemptIndex {
		return fmt.Errorf("%w: attempt %d epoch %d, fence attempt %d epoch %d", CodeStaleLease, idx, epoch, f.AttemptIndex, f.LeaseEpoch)
	}
	if phase != model.PhaseActive || expires == nil {
		return fmt.Errorf("%w: phase %s", CodeExecutionNotActive, phase)
	}
	if *expires <= now {
		return CodeLeaseExpired
	}
	return nil
}

// CompleteExecutionParams are the inputs of CompleteExecution (defined
// once in package backend; Holder is not needed on Postgres). Result is
// stored in ff_exec_core.result; nil stores NULL.
type CompleteExecutionParams = backend.CompleteExecutionParams

// FailExecutionParams are the inputs of FailExecution (defined once in
// package backend; Holder is not needed on Postgres).
type FailExecutionParams = backend.FailExecutionParams

// FailResult is the outcome of FailExecution (defined once in package
// backend); DelayUntil is 0 with no backoff: eligible at once.
type FailResult = backend.FailResult

// RetryPolicy is the retry_policy object of an ExecutionPolicy.
type RetryPolicy struct {
	MaxRetries int `json:"max_retries"`
	Backoff    struct {
		Type           string  `json:"type"`
		InitialDelayMs float64 `json:"initial_delay_ms"`
		MaxDelayMs     float64 `json:"max_delay_ms"`
		Multiplier     float64 `json:"multiplier"`
		DelayMs        float64 `json:"delay_ms"`
	} `json:"backoff"`
	hasBackoff bool
}

// ParseRetryPolicy decodes a retry_policy object; "" or null is the zero
// policy (no retries).
func ParseRetryPolicy(s string) (RetryPolicy, error) {
	var rp RetryPolicy
	if s == "" || s == "null" {
		return rp, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &probe); err != nil {
		return rp, fmt.Errorf("%w: retry_policy: %v", CodeInvalidPolicyJSON, err)
	}
	if err := json.Unmarshal([]byte(s), &rp); err != nil {
		return rp, fmt.Errorf("%w: retry_policy: %v", CodeInvalidPolicyJSON, err)
	}
	_, rp.hasBackoff = probe["backoff"]
	return rp, nil
}

// Delay is the backoff before retry number retryCount+1, in ms: the
// flowfabric library's rule (exponential min(initial·mult^n, max) with
// defaults 1000/2/60000; fixed delay_ms default 1000; 1000 otherwise).
func (rp RetryPolicy) Delay(retryCount int) int64 {
	b := rp.Backoff
	switch b.Type {
	case "exponential":
		initial, mult, maxD := or(b.InitialDelayMs, 1000), or(b.Multiplier, 2), or(b.MaxDelayMs, 60000)
		return int64(math.Round(math.Min(initial*math.Pow(mult, float64(retryCount)), maxD)))
	case "fixed":
		return int64(math.Round(or(b.DelayMs, 1000)))
	}
	return 1000
}

func or(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}

// storedRetryPolicy extracts policy.retry_policy from the stored policy
// document ("" when absent or not an object).
func storedRetryPolicy(policy []byte) string {
	var doc map[string]json.RawMessage
	if len(policy) == 0 || json.Unmarshal(policy, &doc) != nil {
		return ""
	}
	return string(doc["retry_policy"])
}

// FailExecution fails the fenced attempt. With retries left
// (attempt_index < retry_policy.max_retries) the execution is scheduled
// for a retry after the policy's backoff; otherwise it fails terminally.
//
//	retry:    ff_attempt outcome retry, lease NULL, raw_fields failure_reason/category; ff_exec_core runnable / unowned /
//	          not_eligible_until_time (delayed, deadline_at_ms = delay_until) /
//	          pending_retry_attempt, attempt_index+1; ff_lease_event revoked
//	terminal: ff_attempt outcome failed, lease NULL, raw_fields failure_reason/category; ff_exec_core terminal / unowned /
//	          not_applicable / failed / attempt_terminal; ff_completion_event failed;
//	          ff_lease_event revoked
//
// Upstream's handle fail retries on the failure class alone without a
// delay, and its typed fail keeps the delay only in raw_fields where no
// promoter finds it (spec §9 item 8); fabric applies the policy and stores
// the delay in deadline_at_ms, which PromoteDelayedDue scans.
func (c *Client) FailExecution(ctx context.Context, p *FailExecutionParams) (*FailResult, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("fail execution %s: %w", p.ExecutionID, err)
	}
	res := &FailResult{}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		row, err := c.checkFence(ctx, tx, k, p.Fence, now)
		if err != nil {
			return err
		}
		rpText := p.RetryPolicyJSON
		if rpText == "" {
			rpText = storedRetryPolicy(row.policy)
		}
		rp, err := ParseRetryPolicy(rpText)
		if err != nil {
			return err
		}
		idx := p.Fence.AttemptIndex
		if idx < rp.MaxRetries {
			delay := rp.Delay(idx)
			res.RetryScheduled, res.DelayUntil = true, now+delay
			if _, err := tx.Exec(ctx, `UPDATE ff_attempt SET terminal_at_ms = $4, outcome = 'retry', lease_expires_at_ms = NULL,
       raw_fields = raw_fields || jsonb_build_object('failure_reason', $5::text, 'failure_category', $6::text)
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, [16]byte(k.uuid), idx, now,
				p.FailureReason, p.FailureCategory); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `
UPDATE ff_exec_core
   SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'not_eligible_until_time',
       public_state = 'delayed', attempt_state = 'pending_retry_attempt', attempt_index = attempt_index + 1,
       blocking_reason = 'waiting_for_retry_backoff', deadline_at_ms = $3,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $4::bigint::text, 'last_failure_message', $5::text,
           'failure_reason', $5::text, 'failure_category', $6::text, 'retry_count', ($7::int + 1)::text,
           'delay_until', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2`,
				k.part, [16]byte(k.uuid), res.DelayUntil, now, p.FailureReason, p.FailureCategory, idx); err != nil {
				return err
			}
			return emitLeaseEvent(ctx, tx, k, LeaseEventRevoked, "failed_retry_scheduled", now)
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt SET terminal_at_ms = $4, outcome = 'failed', lease_expires_at_ms = NULL,
       raw_fields = raw_fields || jsonb_build_object('failure_reason', $5::text, 'failure_category', $6::text)
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, [16]byte(k.uuid), idx, now,
			p.FailureReason, p.FailureCategory); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
UPDATE ff_exec_core
   SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
       public_state = 'failed', attempt_state = 'attempt_terminal', terminal_at_ms = $3,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text, 'last_failure_message', $4::text,
           'failure_reason', $4::text, 'failure_category', $5::text, 'terminal_outcome', 'failed')
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), now, p.FailureReason, p.FailureCategory); err != nil {
			return err
		}
		if _, err := emitCompletion(ctx, tx, k, model.OutcomeFailed, now, false); err != nil {
			return err
		}
		return emitLeaseEvent(ctx, tx, k, LeaseEventRevoked, "failed_terminal", now)
	})
	if err != nil {
		return nil, fmt.Errorf("fail execution %s: %w", p.ExecutionID, err)
	}
	return res, nil
}

// RenewLeaseParams are the inputs of RenewLease (defined once in package
// backend).
type RenewLeaseParams = backend.RenewLeaseParams

// RenewLease extends the fenced lease to now+ttl and returns the new expiry.
// An expired lease is refused with CodeLeaseExpired.
//
//	ff_attempt: lease_expires_at_ms = now+ttl
//	ff_lease_event: renewed
func (c *Client) RenewLease(ctx context.Context, p *RenewLeaseParams) (int64, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return 0, fmt.Errorf("renew lease %s: %w", p.ExecutionID, err)
	}
	if p.LeaseTTLMs <= 0 {
		return 0, fmt.Errorf("renew lease %s: %w: lease_ttl_ms must be > 0", p.ExecutionID, CodeInvalidInput)
	}
	var expires int64
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		if _, err := c.checkFence(ctx, tx, k, p.Fence, now); err != nil {
			return err
		}
		expires = now + p.LeaseTTLMs
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt SET lease_expires_at_ms = $4
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, [16]byte(k.uuid), p.Fence.AttemptIndex, expires); err != nil {
			return err
		}
		return emitLeaseEvent(ctx, tx, k, LeaseEventRenewed, "", now)
	})
	if err != nil {
		return 0, fmt.Errorf("renew lease %s: %w", p.ExecutionID, err)
	}
	return expires, nil
}

// DelayExecutionParams are the inputs of DelayExecution (defined once in
// package backend; Holder is not needed on Postgres).
type DelayExecutionParams = backend.DelayExecutionParams

// DelayExecution parks the fenced execution until DelayUntil; the same
// attempt continues (under a new lease epoch) after PromoteDelayed.
//
//	ff_attempt: outcome interrupted, lease_expires_at_ms NULL
//	ff_exec_core: runnable / unowned / not_eligible_until_time / delayed /
//	  attempt_interrupted, deadline_at_ms = DelayUntil
//	ff_lease_event: revoked
func (c *Client) DelayExecution(ctx context.Context, p *DelayExecutionParams) error {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return fmt.Errorf("delay execution %s: %w", p.ExecutionID, err)
	}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		if _, err := c.checkFence(ctx, tx, k, p.Fence, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt SET outcome = 'interrupted', lease_expires_at_ms = NULL
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, [16]byte(k.uuid), p.Fence.AttemptIndex); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
UPDATE ff_exec_core
   SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'not_eligible_until_time',
       public_state = 'delayed', attempt_state = 'attempt_interrupted', deadline_at_ms = $3,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $4::bigint::text, 'delay_until', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), p.DelayUntil, now); err != nil {
			return err
		}
		return emitLeaseEvent(ctx, tx, k, LeaseEventRevoked, "worker_delay", now)
	})
	if err != nil {
		return fmt.Errorf("delay execution %s: %w", p.ExecutionID, err)
	}
	return nil
}
