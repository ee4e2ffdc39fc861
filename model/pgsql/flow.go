package pgsql

// Flow tables.
const (
	TEdge          = "ff_edge"
	TEdgeGroup     = "ff_edge_group"
	TPendingCancel = "ff_pending_cancel_groups"
)

// uuidPattern matches the hyphenated uuid text a member list may hold;
// other entries are ignored, as upstream ignores members that do not
// parse.
const uuidPattern = `'^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'`

// Dependency reconciler (upstream reconcilers/dependency + dispatch.rs):
// completion events no dispatcher claimed are claimed and their outgoing
// edges advanced. Flow members, their edges and edge groups share the
// flow's partition_key (RFC-011), so one event is handled on one
// partition.
var (
	// DependencyScan lists event ids of completion events of the
	// partition no dispatcher claimed, committed at or before
	// stale_before_ms, oldest first. The stock plugin now runs
	// DependencyScanMembers and DependencyClaimFlowless instead; the
	// statement stays in the catalog, the host↔plugin contract, for
	// plugins built before them (an older pg_dependency_reconciler.wasm
	// swapped back in).
	DependencyScan = Statement{
		Name: "dependency.scan",
		SQL: `SELECT event_id FROM ff_completion_event
 WHERE partition_key = $1 AND dispatched_at_ms IS NULL AND committed_at_ms <= $2
 ORDER BY event_id ASC
 LIMIT $3`,
		Params: []string{"partition_key", "stale_before_ms", "limit"},
		Tables: []string{TCompletion},
	}
	// DependencyScanMembers is DependencyScan of the events of flow
	// members only (the event names a flow, or its execution is in one
	// now): those DependencyClaimFlowless leaves, each dispatched in a
	// transaction of its own.
	DependencyScanMembers = Statement{
		Name: "dependency.scan_members",
		SQL: `SELECT e.event_id FROM ff_completion_event e
 WHERE e.partition_key = $1 AND e.dispatched_at_ms IS NULL AND e.committed_at_ms <= $2
   AND (e.flow_id IS NOT NULL OR EXISTS (SELECT 1 FROM ff_exec_core c
                                          WHERE c.partition_key = $1 AND c.execution_id = e.execution_id AND c.flow_id IS NOT NULL))
 ORDER BY e.event_id ASC
 LIMIT $3`,
		Params: []string{"partition_key", "stale_before_ms", "limit"},
		Tables: []string{TCompletion, TExecCore},
	}
	// DependencyProbe names, of up to ProbePartitions partitions (a batch
	// call's; a shorter list repeats one of them), those with a completion
	// event DependencyScan would list: one indexed statement for a batch,
	// so a sweep scans only the partitions with work.
	DependencyProbe = Statement{
		Name: "dependency.probe",
		SQL: `SELECT DISTINCT partition_key::int8 FROM ff_completion_event
 WHERE partition_key IN (` + probeList + `) AND dispatched_at_ms IS NULL AND committed_at_ms <= $` + probeNow,
		Params: probeParams("stale_before_ms"),
		Tables: []string{TCompletion},
	}
	// DependencyClaim claims one completion event for dispatch and returns
	// (execution_id, flow_id or '', outcome); no row: another dispatcher
	// claimed it. The row stays locked until the transaction ends, so a
	// concurrent claimer waits and then finds it claimed.
	//
	// An event without a flow takes the execution's flow as it is now: a
	// flow member is created, then added to its flow, and one without
	// parents can be claimed and completed in between — its event then
	// names no flow, while a child added after it counted it as running
	// (its event not yet dispatched), and skipping its edges left that
	// child blocked for good (seen in the Postgres demo).
	DependencyClaim = Statement{
		Name: "dependency.claim",
		SQL: `UPDATE ff_completion_event e SET dispatched_at_ms = $3
 WHERE e.partition_key = $1 AND e.event_id = $2 AND e.dispatched_at_ms IS NULL
RETURNING e.execution_id::text,
          COALESCE(e.flow_id::text, (SELECT c.flow_id::text FROM ff_exec_core c
                                      WHERE c.partition_key = $1 AND c.execution_id = e.execution_id), ''),
          e.outcome`,
		Params: []string{"partition_key", "event_id", "now_ms"},
		Tables: []string{TCompletion, TExecCore},
	}
	// DependencyClaimFlowless claims, in one statement, up to limit of the
	// partition's unclaimed events committed at or before stale_before_ms
	// whose execution is in no flow: the event names none and the
	// execution has none now, the same reading DependencyClaim makes. Such
	// an event has no edge to advance, so claiming it in a transaction of
	// its own only costs round trips — and standalone executions are most
	// of a deployment's completions. Rows another transaction holds are
	// skipped (that claimer handles them). The rows are picked in a CTE,
	// which runs once: an IN (... LIMIT ... SKIP LOCKED) subquery may be
	// rescanned by the plan and claim more than limit. Rows affected: the
	// events claimed.
	DependencyClaimFlowless = Statement{
		Name: "dependency.claim_flowless",
		SQL: `WITH picked AS (
  SELECT p.event_id FROM ff_completion_event p
   WHERE p.partition_key = $1 AND p.dispatched_at_ms IS NULL AND p.committed_at_ms <= $2 AND p.flow_id IS NULL
     AND NOT EXISTS (SELECT 1 FROM ff_exec_core c
                      WHERE c.partition_key = $1 AND c.execution_id = p.execution_id AND c.flow_id IS NOT NULL)
   ORDER BY p.event_id
   LIMIT $4
     FOR UPDATE OF p SKIP LOCKED)
UPDATE ff_completion_event e SET dispatched_at_ms = $3
  FROM picked
 WHERE e.partition_key = $1 AND e.event_id = picked.event_id`,
		Params: []string{"partition_key", "stale_before_ms", "now_ms", "limit"},
		Tables: []string{TCompletion, TExecCore},
	}
	// DependencyOutEdges lists the downstream execution ids of an
	// execution's outgoing edges, one row per edge, in a stable order (the
	// order the edge groups are locked in).
	DependencyOutEdges = Statement{
		Name: "dependency.out_edges",
		SQL: `SELECT downstream_eid::text FROM ff_edge
 WHERE partition_key = $1 AND flow_id = $2::uuid AND upstream_eid = $3::uuid
 ORDER BY downstream_eid, edge_id`,
		Params: []string{"partition_key", "flow_id", "upstream_eid"},
		Tables: []string{TEdge},
	}
	// EdgeGroupLock locks a downstream's edge group and reads its policy
	// decoded as upstream decodes it (kind, default "all_of"; k, default
	// 1; on_satisfied, "" when absent) and its counters (success_count,
	// fail_count, skip_count, running_count); no row: the downstream has
	// no group.
	EdgeGroupLock = Statement{
		Name: "dependency.lock_group",
		SQL: `SELECT COALESCE(policy->>'kind', 'all_of'),
       CASE WHEN jsonb_typeof(policy->'k') = 'number' AND (policy->>'k') ~ '^[0-9]{1,9}$'
            THEN (policy->>'k')::int ELSE 1 END,
       COALESCE(policy->>'on_satisfied', ''),
       success_count, fail_count, skip_count, running_count
  FROM ff_edge_group
 WHERE partition_key = $1 AND flow_id = $2::uuid AND downstream_eid = $3::uuid
   FOR UPDATE`,
		Params: []string{"partition_key", "flow_id", "downstream_eid"},
		Tables: []string{TEdgeGroup},
	}
	// EdgeGroupWriteCounters stores an edge group's counters.
	EdgeGroupWriteCounters = Statement{
		Name: "dependency.write_counters",
		SQL: `UPDATE ff_edge_group SET success_count = $4, fail_count = $5, skip_count = $6, running_count = $7
 WHERE partition_key = $1 AND flow_id = $2::uuid AND downstream_eid = $3::uuid`,
		Params: []string{"partition_key", "flow_id", "downstream_eid", "success", "fail", "skip", "running"},
		Tables: []string{TEdgeGroup},
	}
	// DependencyReleaseChild makes a downstream whose dependencies are
	// satisfied claimable: only one still blocked by dependencies (a
	// running, suspended, delayed or finished execution is left alone).
	DependencyReleaseChild = Statement{
		Name: "dependency.release_child",
		SQL: `UPDATE ff_exec_core
   SET eligibility_state = 'eligible_now', public_state = 'waiting', blocking_reason = NULL,
       lifecycle_phase = CASE WHEN lifecycle_phase = 'blocked' THEN 'runnable' ELSE lifecycle_phase END,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2::uuid
   AND lifecycle_phase NOT IN ('terminal', 'cancelled', 'active', 'suspended')
   AND eligibility_state = 'blocked_by_dependencies'`,
		Params: []string{"partition_key", "execution_id", "now_ms"},
		Tables: []string{TExecCore},
	}
	// DependencySkipChild ends a downstream whose dependencies can no
	// longer be satisfied as skipped, unless it already started or ended;
	// 1 row affected: the caller emits its 'skipped' completion event.
	DependencySkipChild = Statement{
		Name: "dependency.skip_child",
		SQL: `UPDATE ff_exec_core
   SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
       public_state = 'skipped', attempt_state = 'attempt_terminal', blocking_reason = NULL,
       terminal_at_ms = COALESCE(terminal_at_ms, $3),
       raw_fields = raw_fields || jsonb_build_object('terminal_outcome', 'skipped', 'last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2::uuid
   AND lifecycle_phase NOT IN ('terminal', 'cancelled', 'active', 'suspended')`,
		Params: []string{"partition_key", "execution_id", "now_ms"},
		Tables: []string{TExecCore},
	}
	// EdgeGroupFlagSiblings records the sibling cancel of a satisfied
	// group whose policy cancels the rest: the members are the group's
	// other upstreams still unfinished (not terminal, cancelled or
	// skipped). Returns the member count; no row: the group was already
	// flagged.
	EdgeGroupFlagSiblings = Statement{
		Name: "dependency.flag_siblings",
		SQL: `UPDATE ff_edge_group g
   SET cancel_siblings_pending_flag = TRUE,
       cancel_siblings_pending_members = ARRAY(
         SELECT DISTINCT c.execution_id::text
           FROM ff_edge e
           JOIN ff_exec_core c ON c.partition_key = e.partition_key AND c.execution_id = e.upstream_eid
          WHERE e.partition_key = $1 AND e.flow_id = $2::uuid AND e.downstream_eid = $3::uuid
            AND c.lifecycle_phase NOT IN ('terminal', 'cancelled') AND c.public_state <> 'skipped'
            AND c.execution_id <> $4::uuid
          ORDER BY 1)
 WHERE g.partition_key = $1 AND g.flow_id = $2::uuid AND g.downstream_eid = $3::uuid
   AND NOT g.cancel_siblings_pending_flag
RETURNING cardinality(g.cancel_siblings_pending_members)`,
		Params: []string{"partition_key", "flow_id", "downstream_eid", "winner_eid"},
		Tables: []string{TEdgeGroup, TEdge, TExecCore},
	}
	// PendingCancelEnqueue queues a flagged group for the sibling-cancel
	// drain.
	PendingCancelEnqueue = Statement{
		Name: "dependency.enqueue_cancel_group",
		SQL: `INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms)
VALUES ($1, $2::uuid, $3::uuid, $4) ON CONFLICT DO NOTHING`,
		Params: []string{"partition_key", "flow_id", "downstream_eid", "now_ms"},
		Tables: []string{TPendingCancel},
	}
)

// Edge-cancel reconciler (upstream reconcilers/edge_cancel_dispatcher and
// edge_cancel_reconciler, RFC-016 Stages C and D).
var (
	// EdgeCancelScan lists (flow_id, downstream_eid) of the partition's
	// pending sibling-cancel groups, oldest first.
	EdgeCancelScan = Statement{
		Name: "edge_cancel.scan",
		SQL: `SELECT flow_id::text, downstream_eid::text FROM ff_pending_cancel_groups
 WHERE partition_key = $1
 ORDER BY enqueued_at_ms ASC
 LIMIT $2`,
		Params: []string{"partition_key", "limit"},
		Tables: []string{TPendingCancel},
	}
	// EdgeCancelLockGroup locks a pending group's edge group unless
	// another transaction holds it, and reads its flag; no row: the group
	// is locked elsewhere or gone (EdgeCancelGroupExists tells which).
	EdgeCancelLockGroup = Statement{
		Name: "edge_cancel.lock_group",
		SQL: `SELECT cancel_siblings_pending_flag FROM ff_edge_group
 WHERE partition_key = $1 AND flow_id = $2::uuid AND downstream_eid = $3::uuid
   FOR UPDATE SKIP LOCKED`,
		Params: []string{"partition_key", "flow_id", "downstream_eid"},
		Tables: []string{TEdgeGroup},
	}
	// EdgeCancelGroupExists counts (0 or 1) the edge group, without lock.
	EdgeCancelGroupExists = Statement{
		Name: "edge_cancel.group_exists",
		SQL: `SELECT count(*) FROM ff_edge_group
 WHERE partition_key = $1 AND flow_id = $2::uuid AND downstream_eid = $3::uuid`,
		Params: []string{"partition_key", "flow_id", "downstream_eid"},
		Tables: []string{TEdgeGroup},
	}
	// EdgeCancelMembers cancels the group's listed siblings that have not
	// finished and returns (execution_id, attempt_index) of each it
	// cancelled.
	EdgeCancelMembers = Statement{
		Name: "edge_cancel.cancel_members",
		SQL: `UPDATE ff_exec_core c
   SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
       public_state = 'cancelled', attempt_state = 'cancelled', blocking_reason = NULL,
       terminal_at_ms = COALESCE(c.terminal_at_ms, $4),
       cancellation_reason = COALESCE(c.cancellation_reason, 'sibling_quorum_satisfied'),
       cancelled_by = COALESCE(c.cancelled_by, 'engine'),
       raw_fields = c.raw_fields || jsonb_build_object('terminal_outcome', 'cancelled', 'last_mutation_at', $4::bigint::text)
 WHERE c.partition_key = $1
   AND c.execution_id = ANY (ARRAY(
         SELECT m::uuid FROM ff_edge_group g, unnest(g.cancel_siblings_pending_members) AS m
          WHERE g.partition_key = $1 AND g.flow_id = $2::uuid AND g.downstream_eid = $3::uuid
            AND m ~ ` + uuidPattern + `))
   AND c.lifecycle_phase NOT IN ('terminal', 'cancelled')
RETURNING c.execution_id::text, c.attempt_index`,
		Params: []string{"partition_key", "flow_id", "downstream_eid", "now_ms"},
		Tables: []string{TExecCore, TEdgeGroup},
	}
	// EdgeCancelReleaseAttempt ends a cancelled sibling's attempt and
	// clears its live lease; 0 rows affected: it held none.
	EdgeCancelReleaseAttempt = Statement{
		Name: "edge_cancel.release_attempt",
		SQL: `UPDATE ff_attempt SET outcome = 'cancelled', lease_expires_at_ms = NULL, terminal_at_ms = COALESCE(terminal_at_ms, $4)
 WHERE partition_key = $1 AND execution_id = $2::uuid AND attempt_index = $3 AND lease_expires_at_ms IS NOT NULL`,
		Params: []string{"partition_key", "execution_id", "attempt_index", "now_ms"},
		Tables: []string{TAttempt},
	}
	// EdgeCancelClearGroup clears a drained group's flag and members.
	EdgeCancelClearGroup = Statement{
		Name: "edge_cancel.clear_group",
		SQL: `UPDATE ff_edge_group SET cancel_siblings_pending_flag = FALSE, cancel_siblings_pending_members = '{}'
 WHERE partition_key = $1 AND flow_id = $2::uuid AND downstream_eid = $3::uuid`,
		Params: []string{"partition_key", "flow_id", "downstream_eid"},
		Tables: []string{TEdgeGroup},
	}
	// EdgeCancelDequeue removes a pending group.
	EdgeCancelDequeue = Statement{
		Name: "edge_cancel.dequeue",
		SQL: `DELETE FROM ff_pending_cancel_groups
 WHERE partition_key = $1 AND flow_id = $2::uuid AND downstream_eid = $3::uuid`,
		Params: []string{"partition_key", "flow_id", "downstream_eid"},
		Tables: []string{TPendingCancel},
	}
)

// flowStatements are the flow statements of All.
var flowStatements = []Statement{
	DependencyScan, DependencyScanMembers, DependencyProbe, DependencyClaim, DependencyClaimFlowless, DependencyOutEdges, EdgeGroupLock, EdgeGroupWriteCounters,
	DependencyReleaseChild, DependencySkipChild, EdgeGroupFlagSiblings, PendingCancelEnqueue,
	EdgeCancelScan, EdgeCancelLockGroup, EdgeCancelGroupExists, EdgeCancelMembers,
	EdgeCancelReleaseAttempt, EdgeCancelClearGroup, EdgeCancelDequeue, WorkerRegistrySweep,
}

// Worker-registry tables.
const (
	TWorkerRegistry      = "ff_worker_registry"
	TWorkerRegistryEvent = "ff_worker_registry_event"
)

// WorkerRegistryPartitions is the worker registry's partition_key space
// (FNV-1a of the instance id modulo 256), independent of the flow
// partition count.
const WorkerRegistryPartitions = 256

// WorkerRegistrySweep deletes the registrations of one registry partition
// whose TTL lapsed before now and appends a 'ttl_swept' event for each, in
// one statement; it returns the number swept (upstream
// worker_registry::ttl_sweep_tick). Its first parameter is a registry
// partition (0..255), not a flow partition: a scanner call for flow
// partition i sweeps the registry partitions p with p % flow count = i.
var WorkerRegistrySweep = Statement{
	Name: "worker_registry.ttl_sweep",
	SQL: `WITH swept AS (
  DELETE FROM ff_worker_registry
   WHERE partition_key = $1 AND last_heartbeat_ms + liveness_ttl_ms < $2
  RETURNING partition_key, namespace, worker_instance_id
), logged AS (
  INSERT INTO ff_worker_registry_event (partition_key, namespace, worker_instance_id, event_kind, event_at_ms, reason)
  SELECT partition_key, namespace, worker_instance_id, 'ttl_swept', $2, NULL FROM swept
  ON CONFLICT DO NOTHING
  RETURNING 1
)
SELECT count(*) FROM swept`,
	Params: []string{"registry_partition", "now_ms"},
	Tables: []string{TWorkerRegistry, TWorkerRegistryEvent},
}
