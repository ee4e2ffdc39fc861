package fcall

import "github.com/fabric-host/fabric/model"

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
