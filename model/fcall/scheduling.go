package fcall

import "github.com/fabric-host/fabric/model"

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
