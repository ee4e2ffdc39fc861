package fcall

import (
	"slices"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/model"
)

// PromoteStatus is the sub-status of ff_promote_delayed.
type PromoteStatus string

// ff_promote_delayed outcomes.
const (
	PromotePromoted           PromoteStatus = "promoted"
	PromoteNotYetDue          PromoteStatus = "not_yet_due"
	PromoteNotFoundCleaned    PromoteStatus = "not_found_cleaned"
	PromoteNotRunnableCleaned PromoteStatus = "not_runnable_cleaned"
	PromoteNotDelayedCleaned  PromoteStatus = "not_delayed_cleaned"
)

// scannedPartition is p, or id's own partition when p is nil.
func scannedPartition(p *model.Partition, id model.ExecutionID) model.Partition {
	if p != nil {
		return *p
	}
	return id.Partition()
}

// PromoteDelayedParams are the inputs of ff_promote_delayed.
type PromoteDelayedParams struct {
	// ExecutionID is the member read from lane:delayed. It need not parse:
	// garbage members are cleaned up (not_found_cleaned).
	ExecutionID model.ExecutionID
	// Partition is the partition whose lane index is scanned. When nil the
	// partition embedded in ExecutionID is used.
	Partition *model.Partition
	Lane      string
	// NowMs is the scanner's clock (server time).
	NowMs int64
}

// Call builds ff_promote_delayed. exec_core is built on the scanned
// partition, so a member that does not parse lands on its index's slot.
//
//	KEYS[1] exec_core  KEYS[2] lane_delayed(lane)  KEYS[3] lane_eligible(lane)
//	ARGV[1] execution_id  ARGV[2] now_ms
func (p *PromoteDelayedParams) Call() Call {
	part := scannedPartition(p.Partition, p.ExecutionID)
	pk := model.KeysOn(part)
	return Call{Function: "ff_promote_delayed",
		Keys: []string{model.KeysForOn(part, p.ExecutionID).Core(), pk.LaneDelayed(p.Lane), pk.LaneEligible(p.Lane)},
		Args: []string{string(p.ExecutionID), itoa(p.NowMs)}}
}

// DecodePromoteDelayed reads ff_promote_delayed's reply.
func DecodePromoteDelayed(r *Reply) PromoteStatus { return PromoteStatus(r.Field(0)) }

// MarkLeaseExpiredIfDueParams are the inputs of ff_mark_lease_expired_if_due.
type MarkLeaseExpiredIfDueParams struct {
	// ExecutionID is the lease_expiry member; it need not parse.
	ExecutionID model.ExecutionID
	// Partition is the scanned partition; nil = the id's own.
	Partition *model.Partition
}

// Call builds ff_mark_lease_expired_if_due, on the scanned partition.
//
//	KEYS[1] exec_core  KEYS[2] lease_current (unused)  KEYS[3] lease_expiry
//	KEYS[4] lease_history
//	ARGV[1] execution_id
func (p *MarkLeaseExpiredIfDueParams) Call() Call {
	part := scannedPartition(p.Partition, p.ExecutionID)
	k := model.KeysForOn(part, p.ExecutionID)
	return Call{Function: "ff_mark_lease_expired_if_due",
		Keys: []string{k.Core(), k.LeaseCurrent(), model.KeysOn(part).LeaseExpiry(), k.LeaseHistory()},
		Args: []string{string(p.ExecutionID)}}
}

// LeaseCheckResult is the reply of ff_mark_lease_expired_if_due and the
// idempotent replies of ff_revoke_lease.
type LeaseCheckResult struct {
	// Status is "OK" or "ALREADY_SATISFIED".
	Status string
	// Reason is the sub-status: marked_expired, execution_not_found,
	// not_active, already_expired, already_revoked, unowned,
	// not_yet_expired (mark) or revoked, already_revoked, already_expired
	// (revoke).
	Reason string
}

// DecodeLeaseCheck reads ff_mark_lease_expired_if_due's reply.
func DecodeLeaseCheck(r *Reply) *LeaseCheckResult {
	return &LeaseCheckResult{Status: r.Status, Reason: r.Field(0)}
}

// BlockedIndexFor returns the blocked ZSET an admission block with reason
// lands in (and the unblock scanner reads): budget, quota, route
// (waiting_for_capable_worker) or operator (paused_by_operator,
// paused_by_policy and anything else).
func BlockedIndexFor(pk model.PartitionKeys, lane, reason string) string {
	switch reason {
	case "waiting_for_budget":
		return pk.LaneBlockedBudget(lane)
	case "waiting_for_quota":
		return pk.LaneBlockedQuota(lane)
	case "waiting_for_capable_worker":
		return pk.LaneBlockedRoute(lane)
	}
	return pk.LaneBlockedOperator(lane)
}

// UnblockExecutionParams are the inputs of ff_unblock_execution.
type UnblockExecutionParams struct {
	ExecutionID model.ExecutionID
	// Lane is the execution's lane_id.
	Lane string
	// BlockingReason picks the source blocked ZSET (BlockedIndexFor).
	BlockingReason string
	// ExpectedReason is the blocking_reason the call requires ("" = any).
	ExpectedReason string
	NowMs          int64
}

// Call builds ff_unblock_execution.
//
//	KEYS[1] exec_core  KEYS[2] source blocked ZSET  KEYS[3] lane eligible
//	ARGV[1] execution_id  ARGV[2] now_ms  ARGV[3] expected blocking_reason ("" = any)
func (p *UnblockExecutionParams) Call() Call {
	pk := model.KeysOn(p.ExecutionID.Partition())
	return Call{Function: "ff_unblock_execution",
		Keys: []string{model.KeysFor(p.ExecutionID).Core(), BlockedIndexFor(pk, p.Lane, p.BlockingReason),
			pk.LaneEligible(p.Lane)},
		Args: []string{string(p.ExecutionID), itoa(p.NowMs), p.ExpectedReason}}
}

// ResetBudgetParams are the inputs of ff_reset_budget.
type ResetBudgetParams struct {
	// Partition is the budget's {b:M} partition; BudgetID the id as stored.
	Partition model.Partition
	BudgetID  string
	NowMs     int64
}

// Call builds ff_reset_budget.
//
//	KEYS[1] def  KEYS[2] usage  KEYS[3] ff:idx:{b:M}:budget_resets
//	ARGV[1] budget_id  ARGV[2] now_ms
func (p *ResetBudgetParams) Call() Call {
	k := model.BudgetKeysOn(p.Partition, p.BudgetID)
	return Call{Function: "ff_reset_budget",
		Keys: []string{k.Definition(), k.Usage(), k.Resets()},
		Args: []string{p.BudgetID, itoa(p.NowMs)}}
}

// DecodeResetBudget reads ff_reset_budget's reply: next_reset_at (0 when
// the budget has no reset interval).
func DecodeResetBudget(r *Reply) (int64, error) { return r.Int(0) }

// IssueClaimGrantParams are the inputs of ff_issue_claim_grant and
// ff_issue_reclaim_grant.
type IssueClaimGrantParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	// Lane is the execution's lane; its eligible index is KEYS[3] of a
	// claim grant.
	Lane           string
	CapabilityHash string
	// GrantTTLMs is the grant lifetime; the SDK and backend claim use 5000.
	GrantTTLMs         int64
	RouteSnapshotJSON  string
	AdmissionSummary   string
	WorkerCapabilities []string
}

func (p *IssueClaimGrantParams) args() []string {
	return []string{string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, p.Lane, p.CapabilityHash,
		itoa(p.GrantTTLMs), p.RouteSnapshotJSON, p.AdmissionSummary, CapabilityCSV(p.WorkerCapabilities)}
}

// Call builds ff_issue_claim_grant.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] lane_eligible(lane)
//	ARGV[1] execution_id  ARGV[2] worker_id  ARGV[3] worker_instance_id
//	ARGV[4] lane_id  ARGV[5] capability_hash  ARGV[6] grant_ttl_ms
//	ARGV[7] route_snapshot_json  ARGV[8] admission_summary
//	ARGV[9] worker_capabilities_csv (sorted)
func (p *IssueClaimGrantParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	return Call{Function: "ff_issue_claim_grant",
		Keys: []string{k.Core(), k.ClaimGrant(), model.KeysOn(k.Partition()).LaneEligible(p.Lane)}, Args: p.args()}
}

// ReclaimCall builds ff_issue_reclaim_grant: ARGV as Call, KEYS[3] the
// lease_expiry index.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] lease_expiry
func (p *IssueClaimGrantParams) ReclaimCall() Call {
	k := model.KeysFor(p.ExecutionID)
	return Call{Function: "ff_issue_reclaim_grant",
		Keys: []string{k.Core(), k.ClaimGrant(), model.KeysOn(k.Partition()).LeaseExpiry()}, Args: p.args()}
}

// DecodeReclaimGrant reads ff_issue_reclaim_grant's reply: the server's
// grant_expires_at.
func DecodeReclaimGrant(r *Reply) (int64, error) { return r.Int(1) }

// CapabilityCSV renders capabilities as FlowFabric's sorted, de-duplicated
// CSV (empty tokens dropped).
func CapabilityCSV(caps []string) string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		if c != "" {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

// ChangePriorityParams are the inputs of ff_change_priority.
type ChangePriorityParams struct {
	ExecutionID model.ExecutionID
	// Lane is exec_core's lane_id, pre-read.
	Lane     string
	Priority int
}

// Call builds ff_change_priority.
//
//	KEYS[1] exec_core  KEYS[2] lane_eligible(lane_id)
//	ARGV[1] execution_id  ARGV[2] new_priority
func (p *ChangePriorityParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	return Call{Function: "ff_change_priority",
		Keys: []string{k.Core(), model.KeysOn(k.Partition()).LaneEligible(p.Lane)},
		Args: []string{string(p.ExecutionID), strconv.Itoa(p.Priority)}}
}

// ChangePriorityResult is the reply of ff_change_priority.
type ChangePriorityResult struct {
	// Old is the stored priority before the change, New the clamped
	// priority written (0..9000).
	Old, New int64
}

// DecodeChangePriority reads ff_change_priority's reply ok("<old>",
// "<new>"); ok is false when either is not a number.
func DecodeChangePriority(r *Reply) (res *ChangePriorityResult, ok bool) {
	oldP, err1 := r.Int(0)
	newP, err2 := r.Int(1)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	return &ChangePriorityResult{Old: oldP, New: newP}, true
}

// Worker registry statuses.
const (
	WorkerRegistered    = "registered"
	WorkerRefreshed     = "refreshed"
	WorkerNotRegistered = "not_registered"
)

// RegisterWorkerParams are the inputs of ff_register_worker.
type RegisterWorkerParams struct {
	Namespace    string
	InstanceID   string
	WorkerID     string
	Lanes        []string
	Capabilities []string
	TTLMs        int64
	// NowMs is the caller's clock, stored as registered_at_ms and
	// last_heartbeat_ms.
	NowMs int64
	// RefuseLive is not part of ff_register_worker's layout: it asks the
	// caller (the backend contract's RegisterWorker, whose parameters
	// these are too) to leave a live registration alone and answer
	// "alive" — how a starting process detects a duplicate instance id.
	RefuseLive bool
}

// Call builds ff_register_worker. Its keys have no hash tag: on a cluster
// the driver splits it into single-key commands instead.
//
//	KEYS[1] ff:worker:<ns>:<wiid>:alive  KEYS[2] ff:worker:<ns>:<wiid>:caps
//	KEYS[3] ff:idx:<ns>:workers
//	ARGV[1] instance_id  ARGV[2] worker_id  ARGV[3] lanes_csv (sorted)
//	ARGV[4] caps_csv (sorted)  ARGV[5] ttl_ms  ARGV[6] now_ms
func (p *RegisterWorkerParams) Call() Call {
	return Call{Function: "ff_register_worker",
		Keys: []string{model.WorkerAliveKey(p.Namespace, p.InstanceID), model.WorkerCapsKey(p.Namespace, p.InstanceID),
			model.WorkersIndexKey(p.Namespace)},
		Args: []string{p.InstanceID, p.WorkerID, CapabilityCSV(p.Lanes), CapabilityCSV(p.Capabilities),
			itoa(p.TTLMs), itoa(p.NowMs)}}
}

// HeartbeatWorkerParams are the inputs of ff_heartbeat_worker.
type HeartbeatWorkerParams struct {
	Namespace, InstanceID string
	NowMs                 int64
}

// Call builds ff_heartbeat_worker.
//
//	KEYS[1] ff:worker:<ns>:<wiid>:alive  KEYS[2] ff:worker:<ns>:<wiid>:caps
//	ARGV[1] now_ms
func (p *HeartbeatWorkerParams) Call() Call {
	return Call{Function: "ff_heartbeat_worker",
		Keys: []string{model.WorkerAliveKey(p.Namespace, p.InstanceID), model.WorkerCapsKey(p.Namespace, p.InstanceID)},
		Args: []string{itoa(p.NowMs)}}
}

// HeartbeatResult is the reply of ff_heartbeat_worker.
type HeartbeatResult struct {
	// Registered is false when the instance must re-register.
	Registered bool
	// TTLMs is the registered TTL that was re-applied.
	TTLMs int64
	// NextExpiryMs is now_ms + TTLMs.
	NextExpiryMs int64
}

// DecodeHeartbeat reads ff_heartbeat_worker's reply ok("refreshed",
// "<ttl_ms>") or ok("not_registered"), for a heartbeat sent at nowMs.
func DecodeHeartbeat(r *Reply, nowMs int64) (*HeartbeatResult, error) {
	if r.Field(0) != WorkerRefreshed {
		return &HeartbeatResult{}, nil
	}
	ttl, err := r.Int(1)
	if err != nil {
		return nil, err
	}
	return &HeartbeatResult{Registered: true, TTLMs: ttl, NextExpiryMs: nowMs + ttl}, nil
}

// UpdateProgressParams are the inputs of ff_update_progress.
type UpdateProgressParams struct {
	ExecutionID model.ExecutionID
	LeaseID     string
	LeaseEpoch  uint64
	// Pct and Message are written only when non-empty.
	Pct     string
	Message string
}

// Call builds ff_update_progress.
//
//	KEYS[1] exec_core
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch
//	ARGV[4] progress_pct  ARGV[5] progress_message
func (p *UpdateProgressParams) Call() Call {
	return Call{Function: "ff_update_progress", Keys: []string{model.KeysFor(p.ExecutionID).Core()},
		Args: []string{string(p.ExecutionID), p.LeaseID, strconv.FormatUint(p.LeaseEpoch, 10), p.Pct, p.Message}}
}

// IssueGrantAndClaimParams are the inputs of ff_issue_grant_and_claim.
type IssueGrantAndClaimParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	// Lane selects lane:eligible / lane:active and is stored as
	// current_lane. Empty means the execution's lane_id (the driver
	// pre-reads it).
	Lane              string
	CapabilityHash    string
	LeaseID           string
	LeaseTTLMs        int64
	AttemptID         string
	AttemptPolicyJSON string
	// AttemptTimeoutMs and ExecutionDeadlineAt: 0 = none.
	AttemptTimeoutMs    int64
	ExecutionDeadlineAt int64
}

// Call builds ff_issue_grant_and_claim.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] lane_eligible(lane)
//	KEYS[4] lease_expiry  KEYS[5] worker_leases(wiid)  KEYS[6] attempts
//	KEYS[7] lease_current  KEYS[8] lease_history  KEYS[9] lane_active(lane)
//	KEYS[10] attempt_timeout  KEYS[11] execution_deadline
//	ARGV[1] execution_id  ARGV[2] worker_id  ARGV[3] worker_instance_id
//	ARGV[4] lane  ARGV[5] capability_hash  ARGV[6] lease_id
//	ARGV[7] lease_ttl_ms  ARGV[8] attempt_id  ARGV[9] attempt_policy_json
//	ARGV[10] attempt_timeout_ms  ARGV[11] execution_deadline_at
func (p *IssueGrantAndClaimParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	return Call{Function: "ff_issue_grant_and_claim",
		Keys: []string{k.Core(), k.ClaimGrant(), pk.LaneEligible(p.Lane), pk.LeaseExpiry(),
			pk.WorkerLeases(p.WorkerInstanceID), k.Attempts(), k.LeaseCurrent(), k.LeaseHistory(),
			pk.LaneActive(p.Lane), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, p.Lane, p.CapabilityHash, p.LeaseID,
			itoa(p.LeaseTTLMs), p.AttemptID, p.AttemptPolicyJSON, msOrEmpty(p.AttemptTimeoutMs),
			msOrEmpty(p.ExecutionDeadlineAt)}}
}

// GrantAndClaimResult is the reply of ff_issue_grant_and_claim.
type GrantAndClaimResult struct {
	LeaseID      string
	LeaseEpoch   uint64
	AttemptIndex int
}

// DecodeGrantAndClaim reads ff_issue_grant_and_claim's reply ok(lease_id,
// "<epoch>", "<attempt_index>"); ok is false when a number does not parse.
func DecodeGrantAndClaim(r *Reply) (res *GrantAndClaimResult, ok bool) {
	epoch, err1 := strconv.ParseUint(r.Field(1), 10, 64)
	ai, err2 := strconv.Atoi(r.Field(2))
	if err1 != nil || err2 != nil {
		return nil, false
	}
	return &GrantAndClaimResult{LeaseID: r.Field(0), LeaseEpoch: epoch, AttemptIndex: ai}, true
}
