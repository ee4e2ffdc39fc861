package pgsql

// TPeriodic is fabric's table of periodic schedules (not FlowFabric's:
// backend/postgres creates it outside the migration ledger).
const TPeriodic = "fabric_periodic"

// TLaneRegistry is the lane registry a create writes.
const TLaneRegistry = "ff_lane_registry"

// ExecCreateColumns are the columns, in order, of the rows execCoreInsert
// inserts; every other column of a new ff_exec_core row is the same for
// every create (attempt 0, runnable, unowned, attempt pending).
const ExecCreateColumns = "partition_key, execution_id, flow_id, lane_id, required_capabilities, eligibility_state, public_state, " +
	"priority, created_at_ms, deadline_at_ms, payload, policy, raw_fields"

// execCoreInsert is the one INSERT of a new execution: the ff_exec_core
// rows that rows (a VALUES list or a SELECT yielding ExecCreateColumns, in
// order, typed) yields, idempotent on the id, and the registration of
// each inserted row's lane. It is the tail of a WITH whose head is with
// (preceding CTEs, each followed by a comma, or ""); its CTE "ins"
// returns the inserted rows' lane_id. The caller appends the final
// SELECT.
func execCoreInsert(with, rows string) string {
	return `WITH ` + with + `ins AS (
  INSERT INTO ff_exec_core (` + ExecCreateColumns + `,
                            attempt_index, lifecycle_phase, ownership_state, attempt_state)
  SELECT r.*, 0, 'runnable', 'unowned', 'pending' FROM (` + rows + `) r
  ON CONFLICT (partition_key, execution_id) DO NOTHING
  RETURNING lane_id, created_at_ms),
lane AS (
  INSERT INTO ff_lane_registry (lane_id, registered_at_ms, registered_by)
  SELECT lane_id, created_at_ms, 'create_execution' FROM ins
  ON CONFLICT (lane_id) DO NOTHING)
`
}

var (
	// ExecCreate creates one execution row (runnable; eligible now or
	// delayed) and registers its lane, in one statement; it returns the
	// number of rows inserted (0: the id existed, a duplicate).
	// backend/postgres's CreateExecution runs it.
	ExecCreate = Statement{
		Name: "exec_core.create",
		SQL: execCoreInsert("", `VALUES ($1::smallint, $2::uuid, $3::uuid, $4::text, $5::text[], $6::text, $7::text,
                $8::int, $9::bigint, $10::bigint, $11::bytea, $12::jsonb, $13::jsonb)`) +
			`SELECT count(*) FROM ins`,
		Params: []string{"partition_key", "execution_id", "flow_id", "lane_id", "required_capabilities", "eligibility_state",
			"public_state", "priority", "created_at_ms", "deadline_at_ms", "payload", "policy", "raw_fields"},
		Tables: []string{TExecCore, TLaneRegistry},
	}

	// PeriodicDueScan lists a partition's schedules due at now, earliest
	// first, with their timing (every_ms, NULL for a cron schedule;
	// cron; anchor_ms).
	PeriodicDueScan = Statement{
		Name: "periodic.due_scan",
		SQL: `SELECT name, next_due_ms, every_ms, cron, anchor_ms FROM fabric_periodic
 WHERE partition_key = $1 AND next_due_ms <= $2 ORDER BY next_due_ms LIMIT $3`,
		Params: []string{"partition_key", "now_ms", "limit"},
		Tables: []string{TPeriodic},
	}

	// PeriodicNextDue is the earliest tick of a partition's schedules
	// (NULL when it has none).
	PeriodicNextDue = Statement{
		Name:   "periodic.next_due",
		SQL:    `SELECT min(next_due_ms) FROM fabric_periodic WHERE partition_key = $1`,
		Params: []string{"partition_key"},
		Tables: []string{TPeriodic},
	}

	// PeriodicFire fires one tick of a schedule, exactly once: a
	// compare-and-set moves the schedule from tick to next_due (0: the
	// schedule has no tick left, next_due_ms NULL) only if it is still at tick — a
	// concurrent firer waits for the row lock, then finds it moved and
	// does nothing — and creates the tick's execution (execution_id, on
	// the schedule's partition) from the schedule's template through
	// execCoreInsert, tagged with the schedule's name and tick. It returns
	// 1 when this call moved the schedule, 0 when another did (or it was
	// removed).
	PeriodicFire = Statement{
		Name: "periodic.fire",
		SQL: execCoreInsert(`adv AS (
  UPDATE fabric_periodic SET next_due_ms = NULLIF($4::bigint, 0), last_tick_ms = $3, last_execution_id = $5
   WHERE partition_key = $1 AND name = $2 AND next_due_ms = $3
  RETURNING partition_key, name, lane_id, kind, namespace, payload, priority, policy, required_capabilities, tags, creator),
`, `SELECT adv.partition_key, $5::uuid, NULL::uuid, adv.lane_id, adv.required_capabilities, 'eligible_now'::text,
       'waiting'::text, adv.priority, $6::bigint, NULL::bigint, adv.payload, adv.policy,
       jsonb_build_object('namespace', adv.namespace, 'execution_kind', adv.kind, 'creator_identity', '`+PeriodicCreator+`',
         'last_mutation_at', $6::text, 'total_attempt_count', '0',
         'tags', adv.tags || jsonb_build_object('`+PeriodicTagSchedule+`', adv.name, '`+PeriodicTagTick+`', $3::text))
  FROM adv`) + `SELECT count(*) FROM adv`,
		Params: []string{"partition_key", "name", "tick_ms", "next_due_ms", "execution_id", "now_ms"},
		Tables: []string{TPeriodic, TExecCore, TLaneRegistry},
	}
)

// Tags every execution a periodic schedule fires carries (the same as
// internal/periodic's TagSchedule and TagTick on Valkey).
const (
	PeriodicTagSchedule = "fabric.periodic"
	PeriodicTagTick     = "fabric.periodic_tick_ms"
)

// periodicStatements are this file's statements (part of All).
var periodicStatements = []Statement{ExecCreate, PeriodicDueScan, PeriodicNextDue, PeriodicFire}

// PeriodicCreator is the creator_identity of every execution a periodic
// schedule fires (the Valkey periodic plugin's Creator).
const PeriodicCreator = "fabric-periodic"
