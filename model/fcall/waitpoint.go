package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// WaitpointBinding names a waitpoint: its uuid and its external key.
type WaitpointBinding struct {
	WaitpointID  string
	WaitpointKey string
}

// WaitpointGrant is a bound waitpoint and the HMAC token that authenticates
// signals delivered to it.
type WaitpointGrant struct {
	WaitpointID  string
	WaitpointKey string
	Token        string
}

// ResumeParams are the inputs of ff_resume_execution.
type ResumeParams struct {
	ExecutionID model.ExecutionID
	// TriggerType is signal, operator or auto_resume (informational).
	TriggerType string
	// ResumeDelayMs > 0 parks the execution in the delayed index.
	ResumeDelayMs int64
	// Lane and WaitpointID are pre-read from exec_core when empty.
	Lane        string
	WaitpointID string
}

// Call builds the FCALL of ff_resume_execution.
//
//	KEYS[1] exec_core  KEYS[2] suspension_current  KEYS[3] waitpoint(current)
//	KEYS[4] waitpoint_signals  KEYS[5] suspension_timeout  KEYS[6] lane_eligible
//	KEYS[7] lane_delayed  KEYS[8] lane_suspended
//	ARGV[1] execution_id  ARGV[2] trigger_type  ARGV[3] resume_delay_ms
func (p *ResumeParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	lane := laneOrDefault(p.Lane)
	trigger := p.TriggerType
	if trigger == "" {
		trigger = "operator"
	}
	return Call{
		Function: "ff_resume_execution",
		Keys: []string{k.Core(), k.SuspensionCurrent(), pk.Waitpoint(p.WaitpointID),
			pk.WaitpointSignals(p.WaitpointID), pk.SuspensionTimeout(), pk.LaneEligible(lane),
			pk.LaneDelayed(lane), pk.LaneSuspended(lane)},
		Args: []string{string(p.ExecutionID), trigger, itoa(p.ResumeDelayMs)},
	}
}

// CreatePendingWaitpointParams are the inputs of ff_create_pending_waitpoint.
type CreatePendingWaitpointParams struct {
	ExecutionID  model.ExecutionID
	AttemptIndex int
	WaitpointID  string
	WaitpointKey string
	// ExpiresAt is the absolute expiry in ms (FlowFabric computes it from
	// the client clock).
	ExpiresAt int64
}

// Call builds the FCALL of ff_create_pending_waitpoint.
//
//	KEYS[1] exec_core  KEYS[2] waitpoint(wp)  KEYS[3] pending_waitpoint_expiry
//	KEYS[4] hmac_secrets
//	ARGV[1] execution_id  ARGV[2] attempt_index  ARGV[3] waitpoint_id
//	ARGV[4] waitpoint_key  ARGV[5] expires_at
func (p *CreatePendingWaitpointParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	return Call{
		Function: "ff_create_pending_waitpoint",
		Keys: []string{k.Core(), pk.Waitpoint(p.WaitpointID), pk.PendingWaitpointExpiry(),
			pk.WaitpointHMACSecrets()},
		Args: []string{string(p.ExecutionID), strconv.Itoa(p.AttemptIndex), p.WaitpointID,
			p.WaitpointKey, itoa(p.ExpiresAt)},
	}
}

// DecodeWaitpointGrant reads ff_create_pending_waitpoint's reply.
func DecodeWaitpointGrant(rep *Reply) *WaitpointGrant {
	return &WaitpointGrant{rep.Field(0), rep.Field(1), rep.Field(2)}
}
