package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// Defaults FlowFabric's backend sends for the suspension family.
const (
	// SuspendDedupMaxTTLMs caps the suspend idempotency window (7 days).
	SuspendDedupMaxTTLMs = 604800000
	// DefaultLeaseHistoryMaxLen is the lease_history MAXLEN the backend sends.
	DefaultLeaseHistoryMaxLen = 1000
)

// ExpireSuspensionParams are the inputs of ff_expire_suspension, pre-read
// from exec_core by the caller.
type ExpireSuspensionParams struct {
	ExecutionID model.ExecutionID
	// Lane is lane_id ("" builds the "default" lane's keys).
	Lane         string
	AttemptIndex int
	// WaitpointID is current_waitpoint_id.
	WaitpointID string
}

// Call builds ff_expire_suspension.
//
//	KEYS[1] exec_core  KEYS[2] suspension_current  KEYS[3] waitpoint(current)
//	KEYS[4] waitpoint_condition  KEYS[5] attempt_hash(idx)  KEYS[6] stream_meta(idx)
//	KEYS[7] suspension_timeout  KEYS[8] lane_suspended  KEYS[9] lane_terminal
//	KEYS[10] lane_eligible  KEYS[11] lane_delayed  KEYS[12] lease_history
//	ARGV[1] execution_id
func (p *ExpireSuspensionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	lane, i, wp := laneOrDefault(p.Lane), p.AttemptIndex, p.WaitpointID
	return Call{
		Function: "ff_expire_suspension",
		Keys: []string{k.Core(), k.SuspensionCurrent(), pk.Waitpoint(wp), pk.WaitpointCondition(wp),
			k.Attempt(i), k.StreamMeta(i), pk.SuspensionTimeout(), pk.LaneSuspended(lane),
			pk.LaneTerminal(lane), pk.LaneEligible(lane), pk.LaneDelayed(lane), k.LeaseHistory()},
		Args: []string{string(p.ExecutionID)},
	}
}

// ExpireSuspensionResult is the reply of ff_expire_suspension.
type ExpireSuspensionResult struct {
	// Outcome is not_found_cleaned, not_suspended_cleaned,
	// no_active_suspension_cleaned, not_yet_due, auto_resume, escalate, or
	// the applied behavior (fail, cancel, expire, ...).
	Outcome string
	// PublicState is the new public state when a behavior was applied.
	PublicState string
}

// DecodeExpireSuspension reads ff_expire_suspension's reply.
func DecodeExpireSuspension(r *Reply) *ExpireSuspensionResult {
	return &ExpireSuspensionResult{Outcome: r.Field(0), PublicState: r.Field(1)}
}

// CloseWaitpointParams are the inputs of ff_close_waitpoint.
type CloseWaitpointParams struct {
	ExecutionID model.ExecutionID
	WaitpointID string
	// Reason is the close reason ("" sends "proactive_close").
	Reason string
}

// Call builds ff_close_waitpoint.
//
//	KEYS[1] exec_core  KEYS[2] waitpoint  KEYS[3] pending_waitpoint_expiry
//	ARGV[1] waitpoint_id  ARGV[2] reason
func (p *CloseWaitpointParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	reason := p.Reason
	if reason == "" {
		reason = "proactive_close"
	}
	return Call{
		Function: "ff_close_waitpoint",
		Keys:     []string{k.Core(), pk.Waitpoint(p.WaitpointID), pk.PendingWaitpointExpiry()},
		Args:     []string{p.WaitpointID, reason},
	}
}

// DecodeCloseWaitpoint reads ff_close_waitpoint's reply: whether the
// waitpoint was closed before.
func DecodeCloseWaitpoint(r *Reply) (alreadyClosed bool) { return r.Field(0) == "already_closed" }

// SuspendParams are the inputs of ff_suspend_execution.
type SuspendParams struct {
	ExecutionID  model.ExecutionID
	AttemptIndex int
	// Fence is the held lease; all three parts are required
	// (fence_required otherwise).
	Fence Fence

	SuspensionID string
	WaitpointID  string
	// WaitpointKey is "" when UsePendingWaitpoint is set (the pending
	// waitpoint's key is used).
	WaitpointKey string
	ReasonCode   string
	// RequestedBy is worker, operator, policy or system_timeout_policy.
	RequestedBy string
	// TimeoutAt is the absolute timeout in server ms; 0 means none.
	TimeoutAt                   int64
	ResumeConditionJSON         string
	ResumePolicyJSON            string
	ContinuationMetadataPointer string
	UsePendingWaitpoint         bool
	// TimeoutBehavior is fail (default), cancel, expire,
	// auto_resume_with_timeout_signal or escalate.
	TimeoutBehavior string
	// IdempotencyKey replays the first outcome for DedupTTLMs; 0 computes
	// FlowFabric's window min(timeout_at-now+60s, 7d), or 7d without a
	// timeout.
	IdempotencyKey string
	DedupTTLMs     int64
	// Extra waitpoints bound to the same suspension (fresh suspensions only).
	Extra []WaitpointBinding

	// Lane and WorkerInstanceID select the lane index and worker lease
	// set, as the caller pre-read them from exec_core ("" lane builds the
	// "default" lane's keys).
	Lane             string
	WorkerInstanceID string
}

// Call builds the FCALL of ff_suspend_execution. nowMs is used only for
// the default dedup TTL.
//
//	KEYS[1] exec_core  KEYS[2] attempt_hash(idx)  KEYS[3] lease_current
//	KEYS[4] lease_history  KEYS[5] lease_expiry  KEYS[6] worker_leases(wiid)
//	KEYS[7] suspension_current  KEYS[8] waitpoint(wp)  KEYS[9] waitpoint_signals(wp)
//	KEYS[10] suspension_timeout  KEYS[11] pending_waitpoint_expiry
//	KEYS[12] lane_active  KEYS[13] lane_suspended  KEYS[14] waitpoints
//	KEYS[15] waitpoint_condition(wp)  KEYS[16] attempt_timeout  KEYS[17] hmac_secrets
//	KEYS[18] suspend dedup hash or ff:noop:{fp:N}
//	KEYS[19..] per extra: waitpoint, waitpoint_signals, waitpoint_condition
//	ARGV[1] execution_id  ARGV[2] attempt_index  ARGV[3] attempt_id  ARGV[4] lease_id
//	ARGV[5] lease_epoch  ARGV[6] suspension_id  ARGV[7] waitpoint_id  ARGV[8] waitpoint_key
//	ARGV[9] reason_code  ARGV[10] requested_by  ARGV[11] timeout_at|""
//	ARGV[12] resume_condition_json  ARGV[13] resume_policy_json
//	ARGV[14] continuation_metadata_pointer  ARGV[15] use_pending "1"|""
//	ARGV[16] timeout_behavior  ARGV[17] lease_history_maxlen  ARGV[18] idempotency_key
//	ARGV[19] dedup_ttl_ms  ARGV[20] num_extra  ARGV[21..] (waitpoint_id, waitpoint_key)*
func (p *SuspendParams) Call(nowMs int64) Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	lane := laneOrDefault(p.Lane)
	dedup, ttl := pk.Noop(), ""
	if p.IdempotencyKey != "" {
		dedup = k.SuspendDedup(p.IdempotencyKey)
		t := p.DedupTTLMs
		if t <= 0 {
			t = SuspendDedupMaxTTLMs
			if p.TimeoutAt > 0 && p.TimeoutAt-nowMs+60000 < t {
				t = p.TimeoutAt - nowMs + 60000
			}
		}
		ttl = itoa(t)
	}
	pending := ""
	if p.UsePendingWaitpoint {
		pending = "1"
	}
	behavior := p.TimeoutBehavior
	if behavior == "" {
		behavior = "fail"
	}
	keys := []string{
		k.Core(), k.Attempt(p.AttemptIndex), k.LeaseCurrent(), k.LeaseHistory(),
		pk.LeaseExpiry(), pk.WorkerLeases(p.WorkerInstanceID), k.SuspensionCurrent(),
		pk.Waitpoint(p.WaitpointID), pk.WaitpointSignals(p.WaitpointID), pk.SuspensionTimeout(),
		pk.PendingWaitpointExpiry(), pk.LaneActive(lane), pk.LaneSuspended(lane), k.Waitpoints(),
		pk.WaitpointCondition(p.WaitpointID), pk.AttemptTimeout(), pk.WaitpointHMACSecrets(), dedup,
	}
	args := []string{
		string(p.ExecutionID), strconv.Itoa(p.AttemptIndex), p.Fence.AttemptID, p.Fence.LeaseID,
		p.Fence.epoch(), p.SuspensionID, p.WaitpointID, p.WaitpointKey,
		p.ReasonCode, p.RequestedBy, msOrEmpty(p.TimeoutAt), p.ResumeConditionJSON,
		p.ResumePolicyJSON, p.ContinuationMetadataPointer, pending, behavior,
		itoa(DefaultLeaseHistoryMaxLen), p.IdempotencyKey, ttl, strconv.Itoa(len(p.Extra)),
	}
	for _, x := range p.Extra {
		keys = append(keys, pk.Waitpoint(x.WaitpointID), pk.WaitpointSignals(x.WaitpointID),
			pk.WaitpointCondition(x.WaitpointID))
		args = append(args, x.WaitpointID, x.WaitpointKey)
	}
	return Call{Function: "ff_suspend_execution", Keys: keys, Args: args}
}

// SuspendResult is the reply of ff_suspend_execution.
type SuspendResult struct {
	// AlreadySatisfied: buffered signals already satisfied the pending
	// waitpoint; the lease is kept and the execution is still active.
	AlreadySatisfied bool
	SuspensionID     string
	Waitpoint        WaitpointGrant
	Extra            []WaitpointGrant
}

// DecodeSuspend reads ff_suspend_execution's reply: {suspension_id,
// waitpoint_id, waitpoint_key, token, N, then N (waitpoint_id,
// waitpoint_key, token)}; StatusAlreadySatisfied when buffered signals
// already satisfied a pending waitpoint.
func DecodeSuspend(r *Reply) *SuspendResult {
	res := &SuspendResult{
		AlreadySatisfied: r.Status == StatusAlreadySatisfied,
		SuspensionID:     r.Field(0),
		Waitpoint:        WaitpointGrant{WaitpointID: r.Field(1), WaitpointKey: r.Field(2), Token: r.Field(3)},
	}
	n, _ := strconv.Atoi(r.Field(4))
	for i := 0; i < n; i++ {
		b := 5 + 3*i
		res.Extra = append(res.Extra, WaitpointGrant{WaitpointID: r.Field(b), WaitpointKey: r.Field(b + 1), Token: r.Field(b + 2)})
	}
	return res
}
