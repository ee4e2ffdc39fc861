package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// StatusSignalDuplicate: a signal with the same idempotency key was
// already accepted on the waitpoint; the field is the first signal id.
const StatusSignalDuplicate = "DUPLICATE"

// Defaults of the signal family, sent explicitly for zero values.
const (
	DefaultSignalDedupTTLMs       = 86400000
	DefaultSignalMaxLen           = 1000
	DefaultMaxSignalsPerExecution = 10000
	DefaultSignalPayloadEncoding  = "json"
	DefaultSignalTargetScope      = "waitpoint"
)

// SignalParams are the inputs of ff_deliver_signal and
// ff_buffer_signal_for_pending_waitpoint.
type SignalParams struct {
	SignalID       string
	ExecutionID    model.ExecutionID
	WaitpointID    string
	SignalName     string
	SignalCategory string
	SourceType     string
	SourceIdentity string
	Payload        string
	// PayloadEncoding defaults to json.
	PayloadEncoding string
	// IdempotencyKey deduplicates per waitpoint for DedupTTLMs
	// (DefaultSignalDedupTTLMs when 0).
	IdempotencyKey string
	CorrelationID  string
	// TargetScope defaults to waitpoint.
	TargetScope string
	// CreatedAt in ms; 0 lets the server stamp now.
	CreatedAt  int64
	DedupTTLMs int64
	// ResumeDelayMs delays a resume caused by this signal (deliver only).
	ResumeDelayMs int64
	// SignalMaxLen is the waitpoint stream's MAXLEN (default 1000).
	SignalMaxLen int64
	// MaxSignalsPerExecution caps the lifetime signal count (default
	// 10000; negative disables the cap).
	MaxSignalsPerExecution int64
	WaitpointToken         string
	// Lane selects the lane indexes for deliver; pre-read when empty.
	Lane string
}

func (p *SignalParams) args() []string {
	def := func(v, d int64) string {
		if v == 0 {
			v = d
		}
		if v < 0 {
			v = 0
		}
		return strconv.FormatInt(v, 10)
	}
	enc := p.PayloadEncoding
	if enc == "" {
		enc = DefaultSignalPayloadEncoding
	}
	scope := p.TargetScope
	if scope == "" {
		scope = DefaultSignalTargetScope
	}
	return []string{
		p.SignalID, string(p.ExecutionID), p.WaitpointID, p.SignalName, p.SignalCategory,
		p.SourceType, p.SourceIdentity, p.Payload, enc, p.IdempotencyKey, p.CorrelationID,
		scope, msOrEmpty(p.CreatedAt), def(p.DedupTTLMs, DefaultSignalDedupTTLMs),
		strconv.FormatInt(p.ResumeDelayMs, 10), def(p.SignalMaxLen, DefaultSignalMaxLen),
		def(p.MaxSignalsPerExecution, DefaultMaxSignalsPerExecution), p.WaitpointToken,
	}
}

func (p *SignalParams) dedupKey(pk model.PartitionKeys) string {
	if p.IdempotencyKey == "" {
		return pk.Noop()
	}
	return pk.SignalDedup(p.WaitpointID, p.IdempotencyKey)
}

// DeliverCall builds the FCALL of ff_deliver_signal.
//
//	KEYS[1] exec_core  KEYS[2] waitpoint_condition  KEYS[3] waitpoint_signals
//	KEYS[4] exec_signals  KEYS[5] signal  KEYS[6] signal_payload
//	KEYS[7] signal_dedup or ff:noop:{fp:N}  KEYS[8] waitpoint  KEYS[9] suspension_current
//	KEYS[10] lane_eligible  KEYS[11] lane_suspended  KEYS[12] lane_delayed
//	KEYS[13] suspension_timeout  KEYS[14] hmac_secrets  KEYS[15] signal_delivery stream
//	ARGV[1] signal_id  ARGV[2] execution_id  ARGV[3] waitpoint_id  ARGV[4] signal_name
//	ARGV[5] signal_category  ARGV[6] source_type  ARGV[7] source_identity  ARGV[8] payload
//	ARGV[9] payload_encoding  ARGV[10] idempotency_key  ARGV[11] correlation_id
//	ARGV[12] target_scope  ARGV[13] created_at|""  ARGV[14] dedup_ttl_ms
//	ARGV[15] resume_delay_ms  ARGV[16] signal_maxlen  ARGV[17] max_signals_per_execution
//	ARGV[18] waitpoint_token
func (p *SignalParams) DeliverCall() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	lane := laneOrDefault(p.Lane)
	return Call{
		Function: "ff_deliver_signal",
		Keys: []string{k.Core(), pk.WaitpointCondition(p.WaitpointID), pk.WaitpointSignals(p.WaitpointID),
			k.Signals(), pk.Signal(p.SignalID), pk.SignalPayload(p.SignalID), p.dedupKey(pk),
			pk.Waitpoint(p.WaitpointID), k.SuspensionCurrent(), pk.LaneEligible(lane),
			pk.LaneSuspended(lane), pk.LaneDelayed(lane), pk.SuspensionTimeout(),
			pk.WaitpointHMACSecrets(), pk.SignalDelivery()},
		Args: p.args(),
	}
}

// BufferCall builds the FCALL of ff_buffer_signal_for_pending_waitpoint.
//
//	KEYS[1] exec_core  KEYS[2] waitpoint_condition  KEYS[3] waitpoint_signals
//	KEYS[4] exec_signals  KEYS[5] signal  KEYS[6] signal_payload
//	KEYS[7] signal_dedup or ff:noop:{fp:N}  KEYS[8] waitpoint  KEYS[9] hmac_secrets
//	ARGV: as DeliverCall (resume_delay_ms unused).
func (p *SignalParams) BufferCall() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	return Call{
		Function: "ff_buffer_signal_for_pending_waitpoint",
		Keys: []string{k.Core(), pk.WaitpointCondition(p.WaitpointID), pk.WaitpointSignals(p.WaitpointID),
			k.Signals(), pk.Signal(p.SignalID), pk.SignalPayload(p.SignalID), p.dedupKey(pk),
			pk.Waitpoint(p.WaitpointID), pk.WaitpointHMACSecrets()},
		Args: p.args(),
	}
}

// SignalResult is the reply of the signal functions.
type SignalResult struct {
	// SignalID is the accepted signal, or on a duplicate the signal first
	// accepted under the idempotency key.
	SignalID string
	// Effect is resume_condition_satisfied, appended_to_waitpoint, no_op,
	// signal_ignored_not_in_condition, signal_ignored_matcher_failed,
	// appended_to_waitpoint_duplicate or buffered_for_pending_waitpoint;
	// empty on a duplicate.
	Effect    string
	Duplicate bool
}

// DecodeSignal reads the reply of ff_deliver_signal and
// ff_buffer_signal_for_pending_waitpoint.
func DecodeSignal(rep *Reply) *SignalResult {
	if rep.Status == StatusSignalDuplicate {
		return &SignalResult{SignalID: rep.Field(0), Duplicate: true}
	}
	return &SignalResult{SignalID: rep.Field(0), Effect: rep.Field(1)}
}

// ClaimResumedParams are the inputs of ff_claim_resumed_execution.
type ClaimResumedParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	Lane             string
	CapabilityHash   string
	LeaseID          string
	LeaseTTLMs       int64
	// RemainingAttemptTimeoutMs re-arms the attempt timeout; 0 means none.
	RemainingAttemptTimeoutMs int64
	// AttemptIndex is the current attempt index; the wrapper pre-reads it
	// from exec_core unless AttemptIndexKnown is set.
	AttemptIndex      int
	AttemptIndexKnown bool
}

// Call builds the FCALL of ff_claim_resumed_execution.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] lane_eligible  KEYS[4] lease_expiry
//	KEYS[5] worker_leases(wiid)  KEYS[6] attempt_hash(idx)  KEYS[7] lease_current
//	KEYS[8] lease_history  KEYS[9] lane_active  KEYS[10] attempt_timeout
//	KEYS[11] execution_deadline
//	ARGV[1] execution_id  ARGV[2] worker_id  ARGV[3] worker_instance_id  ARGV[4] lane
//	ARGV[5] capability_hash  ARGV[6] lease_id  ARGV[7] lease_ttl_ms
//	ARGV[8] remaining_attempt_timeout_ms|""
func (p *ClaimResumedParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	lane := laneOrDefault(p.Lane)
	return Call{
		Function: "ff_claim_resumed_execution",
		Keys: []string{k.Core(), k.ClaimGrant(), pk.LaneEligible(lane), pk.LeaseExpiry(),
			pk.WorkerLeases(p.WorkerInstanceID), k.Attempt(p.AttemptIndex), k.LeaseCurrent(),
			k.LeaseHistory(), pk.LaneActive(lane), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, lane,
			p.CapabilityHash, p.LeaseID, itoa(p.LeaseTTLMs), msOrEmpty(p.RemainingAttemptTimeoutMs)},
	}
}

// ClaimResumedResult is the reply of ff_claim_resumed_execution.
type ClaimResumedResult struct {
	LeaseID      string
	LeaseEpoch   uint64
	ExpiresAt    int64
	AttemptID    string
	AttemptIndex int
}

// DecodeClaimResumed reads ff_claim_resumed_execution's reply.
func DecodeClaimResumed(rep *Reply) *ClaimResumedResult {
	epoch, _ := strconv.ParseUint(rep.Field(1), 10, 64)
	exp, _ := strconv.ParseInt(rep.Field(2), 10, 64)
	idx, _ := strconv.Atoi(rep.Field(4))
	return &ClaimResumedResult{
		LeaseID: rep.Field(0), LeaseEpoch: epoch, ExpiresAt: exp,
		AttemptID: rep.Field(3), AttemptIndex: idx,
	}
}
