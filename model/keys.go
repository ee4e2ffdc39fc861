package model

import "strconv"

// ExecKeys builds the per-execution keys of one execution. All of them carry
// the execution's {fp:N} tag twice (once as the key's tag, once inside the
// id), exactly as FlowFabric writes them.
type ExecKeys struct {
	tag string
	id  ExecutionID
}

// KeysFor returns the key builder of an execution.
func KeysFor(id ExecutionID) ExecKeys {
	return ExecKeys{tag: id.Partition().Tag(), id: id}
}

func (k ExecKeys) exec(suffix string) string {
	return "ff:exec:" + k.tag + ":" + string(k.id) + ":" + suffix
}

func (k ExecKeys) attempt(i int, suffix string) string {
	s := "ff:attempt:" + k.tag + ":" + string(k.id) + ":" + strconv.Itoa(i)
	if suffix != "" {
		s += ":" + suffix
	}
	return s
}

// ID returns the execution id.
func (k ExecKeys) ID() ExecutionID { return k.id }

// Partition returns the execution's partition.
func (k ExecKeys) Partition() Partition { return k.id.Partition() }

// Core is the authoritative exec_core hash.
func (k ExecKeys) Core() string { return k.exec("core") }

// Payload is the input payload string.
func (k ExecKeys) Payload() string { return k.exec("payload") }

// Result is the result payload string.
func (k ExecKeys) Result() string { return k.exec("result") }

// Policy is the ExecutionPolicy JSON string.
func (k ExecKeys) Policy() string { return k.exec("policy") }

// Tags is the user label hash.
func (k ExecKeys) Tags() string { return k.exec("tags") }

// LeaseCurrent is the current lease hash.
func (k ExecKeys) LeaseCurrent() string { return k.exec("lease:current") }

// LeaseHistory is the lease event stream.
func (k ExecKeys) LeaseHistory() string { return k.exec("lease:history") }

// ClaimGrant is the ephemeral claim grant hash.
func (k ExecKeys) ClaimGrant() string { return k.exec("claim_grant") }

// Attempts is the attempt index sorted set.
func (k ExecKeys) Attempts() string { return k.exec("attempts") }

// Attempt is the per-attempt hash of attempt i.
func (k ExecKeys) Attempt(i int) string { return k.attempt(i, "") }

// AttemptUsage is attempt i's usage hash.
func (k ExecKeys) AttemptUsage(i int) string { return k.attempt(i, "usage") }

// AttemptPolicy is attempt i's flattened policy hash.
func (k ExecKeys) AttemptPolicy(i int) string { return k.attempt(i, "policy") }

// StreamSummary is attempt i's durable summary hash.
func (k ExecKeys) StreamSummary(i int) string { return k.attempt(i, "summary") }

// Stream is attempt i's output frame stream.
func (k ExecKeys) Stream(i int) string {
	return "ff:stream:" + k.tag + ":" + string(k.id) + ":" + strconv.Itoa(i)
}

// StreamMeta is attempt i's stream metadata hash.
func (k ExecKeys) StreamMeta(i int) string { return k.Stream(i) + ":meta" }

// SuspensionCurrent is the current suspension hash.
func (k ExecKeys) SuspensionCurrent() string { return k.exec("suspension:current") }

// SuspensionSatisfiedSet is the composite satisfier token set.
func (k ExecKeys) SuspensionSatisfiedSet() string { return k.exec("suspension:current:satisfied_set") }

// SuspensionMemberMap is the composite node map.
func (k ExecKeys) SuspensionMemberMap() string { return k.exec("suspension:current:member_map") }

// Waitpoints is the set of every waitpoint id the execution used.
func (k ExecKeys) Waitpoints() string { return k.exec("waitpoints") }

// Signals is the execution's signal sorted set.
func (k ExecKeys) Signals() string { return k.exec("signals") }

// SuspendDedup is the suspend idempotency hash for key.
func (k ExecKeys) SuspendDedup(key string) string {
	return "ff:dedup:suspend:" + k.tag + ":" + string(k.id) + ":" + key
}

// DepsMeta is the dependency counter hash.
func (k ExecKeys) DepsMeta() string { return k.exec("deps:meta") }

// DepEdge is the execution-side state of one inbound edge.
func (k ExecKeys) DepEdge(edge string) string { return k.exec("dep:" + edge) }

// DepsUnresolved is the set of unresolved inbound edge ids.
func (k ExecKeys) DepsUnresolved() string { return k.exec("deps:unresolved") }

// DepsAllEdges is the set of every applied inbound edge id.
func (k ExecKeys) DepsAllEdges() string { return k.exec("deps:all_edges") }

// PartitionKeys builds the keys that live on one {fp:N} partition but are
// not owned by a single execution: indexes, waitpoints, signals.
type PartitionKeys struct{ tag string }

// KeysOn returns the key builder of partition p (a flow-family partition).
func KeysOn(p Partition) PartitionKeys { return PartitionKeys{tag: p.Tag()} }

// Tag returns the partition's hash tag.
func (k PartitionKeys) Tag() string { return k.tag }

func (k PartitionKeys) idx(suffix string) string { return "ff:idx:" + k.tag + ":" + suffix }

func (k PartitionKeys) lane(lane, suffix string) string {
	return "ff:idx:" + k.tag + ":lane:" + lane + ":" + suffix
}

// LaneEligible: score created_at - priority*1e12.
func (k PartitionKeys) LaneEligible(lane string) string { return k.lane(lane, "eligible") }

// LaneDelayed: score delay_until.
func (k PartitionKeys) LaneDelayed(lane string) string { return k.lane(lane, "delayed") }

// LaneActive: score lease expiry at claim time.
func (k PartitionKeys) LaneActive(lane string) string { return k.lane(lane, "active") }

// LaneTerminal: score terminal transition time.
func (k PartitionKeys) LaneTerminal(lane string) string { return k.lane(lane, "terminal") }

// LaneSuspended: score timeout_at or 9999999999999.
func (k PartitionKeys) LaneSuspended(lane string) string { return k.lane(lane, "suspended") }

// LaneBlockedDependencies: score created_at.
func (k PartitionKeys) LaneBlockedDependencies(lane string) string {
	return k.lane(lane, "blocked:dependencies")
}

// LaneBlockedBudget: score block time.
func (k PartitionKeys) LaneBlockedBudget(lane string) string { return k.lane(lane, "blocked:budget") }

// LaneBlockedQuota: score block time.
func (k PartitionKeys) LaneBlockedQuota(lane string) string { return k.lane(lane, "blocked:quota") }

// LaneBlockedRoute: score block time.
func (k PartitionKeys) LaneBlockedRoute(lane string) string { return k.lane(lane, "blocked:route") }

// LaneBlockedOperator: score block time.
func (k PartitionKeys) LaneBlockedOperator(lane string) string {
	return k.lane(lane, "blocked:operator")
}

// LaneIndexNames are the suffixes of a lane's execution indexes, in the
// order LaneIndexes returns them (and fabric_reconcile_execution_index
// takes them as KEYS).
var LaneIndexNames = []string{
	"eligible", "delayed", "active", "suspended", "terminal",
	"blocked:dependencies", "blocked:budget", "blocked:quota", "blocked:route", "blocked:operator",
}

// LaneIndexes returns the keys of every execution index of lane, in
// LaneIndexNames order.
func (k PartitionKeys) LaneIndexes(lane string) []string {
	out := make([]string, len(LaneIndexNames))
	for i, n := range LaneIndexNames {
		out[i] = k.lane(lane, n)
	}
	return out
}

// WaitpointHMACSecrets is the per-partition HMAC keystore.
func (k PartitionKeys) WaitpointHMACSecrets() string { return "ff:sec:" + k.tag + ":waitpoint_hmac" }

// LeaseExpiry: score lease expires_at (refreshed on renew).
func (k PartitionKeys) LeaseExpiry() string { return k.idx("lease_expiry") }

// WorkerLeases is the set of executions leased by a worker instance. The
// engine passes "" when it does not know the owner.
func (k PartitionKeys) WorkerLeases(workerInstanceID string) string {
	return k.idx("worker:" + workerInstanceID + ":leases")
}

// SuspensionTimeout: score timeout_at.
func (k PartitionKeys) SuspensionTimeout() string { return k.idx("suspension_timeout") }

// PendingWaitpointExpiry: member waitpoint id, score pending expires_at.
func (k PartitionKeys) PendingWaitpointExpiry() string { return k.idx("pending_waitpoint_expiry") }

// AttemptTimeout: score claim time + attempt timeout.
func (k PartitionKeys) AttemptTimeout() string { return k.idx("attempt_timeout") }

// ExecutionDeadline: score absolute deadline.
func (k PartitionKeys) ExecutionDeadline() string { return k.idx("execution_deadline") }

// AllExecutions is the set of every execution on the partition.
func (k PartitionKeys) AllExecutions() string { return k.idx("all_executions") }

// SignalDelivery is the partition's signal delivery stream.
func (k PartitionKeys) SignalDelivery() string { return "ff:part:" + k.tag + ":signal_delivery" }

// FlowIndex is the set of flow ids on the partition.
func (k PartitionKeys) FlowIndex() string { return k.idx("flow_index") }

// CancelBacklog: member flow id, score cancel time + grace.
func (k PartitionKeys) CancelBacklog() string { return k.idx("cancel_backlog") }

// PendingCancelGroups: members "<flow_id>|<downstream_eid>".
func (k PartitionKeys) PendingCancelGroups() string { return k.idx("pending_cancel_groups") }

// Waitpoint is a waitpoint hash (keyed by the waitpoint uuid, not the eid).
func (k PartitionKeys) Waitpoint(wp string) string { return "ff:wp:" + k.tag + ":" + wp }

// WaitpointSignals is a waitpoint's signal stream.
func (k PartitionKeys) WaitpointSignals(wp string) string { return k.Waitpoint(wp) + ":signals" }

// WaitpointCondition is a waitpoint's resume-condition hash.
func (k PartitionKeys) WaitpointCondition(wp string) string { return k.Waitpoint(wp) + ":condition" }

// Signal is a signal hash.
func (k PartitionKeys) Signal(sig string) string { return "ff:signal:" + k.tag + ":" + sig }

// SignalPayload is a signal's payload string.
func (k PartitionKeys) SignalPayload(sig string) string { return k.Signal(sig) + ":payload" }

// SignalDedup is the per-waitpoint signal idempotency key.
func (k PartitionKeys) SignalDedup(wp, idemKey string) string {
	return "ff:sigdedup:" + k.tag + ":" + wp + ":" + idemKey
}

// Idempotency is the create-idempotency key of namespace ns.
func (k PartitionKeys) Idempotency(ns, idemKey string) string {
	return "ff:idem:" + k.tag + ":" + ns + ":" + idemKey
}

// Noop is the placeholder key for optional KEYS slots; never read or written.
func (k PartitionKeys) Noop() string { return "ff:noop:" + k.tag }

// PeriodicIndex is the zset of the partition's periodic schedules (fabric's
// own, not FlowFabric's): member the schedule name, score its next due
// tick (ms). The periodic scanner serves it.
func (k PartitionKeys) PeriodicIndex() string { return k.idx("periodic") }

// PeriodicSchedule is the hash defining periodic schedule name (kind, lane,
// payload, policy, interval or cron expression, next due tick).
func (k PartitionKeys) PeriodicSchedule(name string) string {
	return "ff:periodic:" + k.tag + ":" + name
}

// FlowKeys builds the keys of one flow.
type FlowKeys struct {
	tag  string
	flow string
}

// FlowKeysFor returns the key builder of flow id on partition p.
func FlowKeysFor(p Partition, flow UUID) FlowKeys {
	return FlowKeys{tag: p.Tag(), flow: flow.String()}
}

// FlowKeysOn returns the key builder of the flow whose id is the raw
// string flowID (as read from an index or a hash, not parsed) on p.
func FlowKeysOn(p Partition, flowID string) FlowKeys {
	return FlowKeys{tag: p.Tag(), flow: flowID}
}

func (k FlowKeys) key(suffix string) string { return "ff:flow:" + k.tag + ":" + k.flow + ":" + suffix }

// Core is the flow record hash.
func (k FlowKeys) Core() string { return k.key("core") }

// Members is the set of member execution ids.
func (k FlowKeys) Members() string { return k.key("members") }

// Tags is the flow label hash.
func (k FlowKeys) Tags() string { return k.key("tags") }

// Edge is an edge record hash.
func (k FlowKeys) Edge(edge string) string { return k.key("edge:" + edge) }

// Outgoing is the set of edge ids leaving an upstream execution.
func (k FlowKeys) Outgoing(up ExecutionID) string { return k.key("out:" + string(up)) }

// Incoming is the set of edge ids entering a downstream execution.
func (k FlowKeys) Incoming(down ExecutionID) string { return k.key("in:" + string(down)) }

// EdgeGroup is the inbound edge-group hash of a downstream execution.
func (k FlowKeys) EdgeGroup(down ExecutionID) string { return k.key("edgegroup:" + string(down)) }

// Summary is the projector's summary hash.
func (k FlowKeys) Summary() string { return k.key("summary") }

// Grant is the stage-edge mutation grant slot (passed, unused by Lua).
func (k FlowKeys) Grant(mutation string) string { return k.key("grant:" + mutation) }

// PendingCancels is the set of member ids still owed a cancel.
func (k FlowKeys) PendingCancels() string { return k.key("pending_cancels") }

// BudgetKeys builds the keys of one budget on its {b:M} partition.
type BudgetKeys struct {
	tag string
	id  string
}

// BudgetKeysFor returns the key builder of budget id on partition p.
func BudgetKeysFor(p Partition, id UUID) BudgetKeys { return BudgetKeys{tag: p.Tag(), id: id.String()} }

// BudgetKeysOn returns the key builder of the budget whose id is the raw
// string id (as read from an index, not parsed) on p.
func BudgetKeysOn(p Partition, id string) BudgetKeys { return BudgetKeys{tag: p.Tag(), id: id} }

// Definition is the budget definition hash.
func (k BudgetKeys) Definition() string { return "ff:budget:" + k.tag + ":" + k.id }

// Limits is the hard:/soft: limit hash.
func (k BudgetKeys) Limits() string { return k.Definition() + ":limits" }

// Usage is the usage counter hash.
func (k BudgetKeys) Usage() string { return k.Definition() + ":usage" }

// ByExec is one execution's usage deltas.
func (k BudgetKeys) ByExec(id ExecutionID) string { return k.Definition() + ":by_exec:" + string(id) }

// ByExecIndex is the set of executions with deltas.
func (k BudgetKeys) ByExecIndex() string { return k.Definition() + ":by_exec:index" }

// Resets: member budget id, score next_reset_at.
func (k BudgetKeys) Resets() string { return "ff:idx:" + k.tag + ":budget_resets" }

// Policies is the set of budget ids on the partition.
func (k BudgetKeys) Policies() string { return "ff:idx:" + k.tag + ":budget_policies" }

// UsageDedup is a usage report dedup key.
func (k BudgetKeys) UsageDedup(dedupID string) string {
	return "ff:usagededup:" + k.tag + ":" + dedupID
}

// QuotaKeys builds the keys of one quota policy on its {q:K} partition.
type QuotaKeys struct {
	tag string
	id  string
}

// QuotaKeysFor returns the key builder of quota policy id on partition p.
func QuotaKeysFor(p Partition, id UUID) QuotaKeys { return QuotaKeys{tag: p.Tag(), id: id.String()} }

// Definition is the quota policy hash.
func (k QuotaKeys) Definition() string { return "ff:quota:" + k.tag + ":" + k.id }

// Window is the sliding window of a dimension.
func (k QuotaKeys) Window(dim string) string { return k.Definition() + ":window:" + dim }

// Concurrency is the concurrency counter.
func (k QuotaKeys) Concurrency() string { return k.Definition() + ":concurrency" }

// Admitted is an execution's admission guard.
func (k QuotaKeys) Admitted(id ExecutionID) string { return k.Definition() + ":admitted:" + string(id) }

// AdmittedSet is the set of admitted executions.
func (k QuotaKeys) AdmittedSet() string { return k.Definition() + ":admitted_set" }

// Policies is the set of quota policy ids on the partition.
func (k QuotaKeys) Policies() string { return "ff:idx:" + k.tag + ":quota_policies" }

// Global keys without a hash tag.
const (
	// KeyConfigPartitions is the ff:config:partitions hash.
	KeyConfigPartitions = "ff:config:partitions"
	// KeyLanesIndex is the set of lane ids seeded at boot.
	KeyLanesIndex = "ff:idx:lanes"
	// KeyPeriodicRegistry is the hash of every periodic schedule: name →
	// lane (the schedule lives on the lane's solo partition).
	KeyPeriodicRegistry = "ff:periodic:registry"
	// ChannelDAGCompletions is the pub/sub channel of flow-member terminal
	// transitions.
	ChannelDAGCompletions = "ff:dag:completions"
)

// WorkerAliveKey is a worker instance's liveness key.
func WorkerAliveKey(ns, instance string) string { return "ff:worker:" + ns + ":" + instance + ":alive" }

// WorkerCapsKey is a worker instance's capability hash.
func WorkerCapsKey(ns, instance string) string { return "ff:worker:" + ns + ":" + instance + ":caps" }

// WorkersIndexKey is the set of worker instance ids of a namespace.
func WorkersIndexKey(ns string) string { return "ff:idx:" + ns + ":workers" }

// KeysForOn returns the key builder of execution id under partition p's
// hash tag instead of its own. FlowFabric's dependency router builds the
// upstream's result key on the child's tag (flow members share one slot).
func KeysForOn(p Partition, id ExecutionID) ExecKeys { return ExecKeys{tag: p.Tag(), id: id} }
