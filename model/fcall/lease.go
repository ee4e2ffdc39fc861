package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// RenewLeaseParams are the inputs of ff_renew_lease. The whole fence
// (attempt index, attempt id, lease id, lease epoch) is required.
type RenewLeaseParams struct {
	ExecutionID  model.ExecutionID
	AttemptIndex int
	AttemptID    string
	LeaseID      string
	LeaseEpoch   uint64
	LeaseTTLMs   int64
	// HistoryGraceMs is added to the new expiry for lease_current's
	// PEXPIREAT; workers pass 5000.
	HistoryGraceMs int64
}

// Call builds ff_renew_lease.
//
//	KEYS[1] exec_core  KEYS[2] lease_current  KEYS[3] lease_history
//	KEYS[4] lease_expiry
//	ARGV[1] execution_id  ARGV[2] attempt_index  ARGV[3] attempt_id
//	ARGV[4] lease_id  ARGV[5] lease_epoch  ARGV[6] lease_ttl_ms
//	ARGV[7] lease_history_grace_ms
func (p *RenewLeaseParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	return Call{Function: "ff_renew_lease",
		Keys: []string{k.Core(), k.LeaseCurrent(), k.LeaseHistory(), model.KeysOn(k.Partition()).LeaseExpiry()},
		Args: []string{string(p.ExecutionID), strconv.Itoa(p.AttemptIndex), p.AttemptID, p.LeaseID,
			strconv.FormatUint(p.LeaseEpoch, 10), itoa(p.LeaseTTLMs), itoa(p.HistoryGraceMs)}}
}

// DecodeRenewLease reads ff_renew_lease's reply: the new expires_at.
func DecodeRenewLease(r *Reply) (int64, error) { return r.Int(0) }

// RevokeLeaseParams are the inputs of ff_revoke_lease.
type RevokeLeaseParams struct {
	ExecutionID model.ExecutionID
	// ExpectedLeaseID, when set, must equal the current lease id.
	ExpectedLeaseID string
	// Reason is stored as lease_revoke_reason; empty sends "operator"
	// (the library's own default when the slot is absent).
	Reason string
	// WorkerInstanceID is exec_core's current_worker_instance_id, pre-read.
	WorkerInstanceID string
}

// Call builds ff_revoke_lease.
//
//	KEYS[1] exec_core  KEYS[2] lease_current  KEYS[3] lease_history
//	KEYS[4] lease_expiry  KEYS[5] worker_leases(holder wiid)
//	ARGV[1] execution_id  ARGV[2] expected_lease_id ("" = any)
//	ARGV[3] revoke_reason
func (p *RevokeLeaseParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	reason := p.Reason
	if reason == "" {
		reason = "operator"
	}
	return Call{Function: "ff_revoke_lease",
		Keys: []string{k.Core(), k.LeaseCurrent(), k.LeaseHistory(), pk.LeaseExpiry(), pk.WorkerLeases(p.WorkerInstanceID)},
		Args: []string{string(p.ExecutionID), p.ExpectedLeaseID, reason}}
}

// RevokeLeaseResult is the reply of ff_revoke_lease.
type RevokeLeaseResult struct {
	LeaseCheckResult
	// LeaseID and LeaseEpoch identify the revoked lease (Status "OK").
	LeaseID    string
	LeaseEpoch string
}

// DecodeRevokeLease reads ff_revoke_lease's reply ok("revoked", lease_id,
// epoch) or {1, "ALREADY_SATISFIED", reason}; ok is false on any other
// status.
func DecodeRevokeLease(r *Reply) (res *RevokeLeaseResult, ok bool) {
	if r.Status != "OK" && r.Status != StatusAlreadySatisfied {
		return nil, false
	}
	return &RevokeLeaseResult{LeaseCheckResult: *DecodeLeaseCheck(r), LeaseID: r.Field(1), LeaseEpoch: r.Field(2)}, true
}
