package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// Fence is the (lease_id, lease_epoch, attempt_id) triple of a
// lease-checked call, and the attempt index it was issued for (which the
// library does not check); the zero Fence is the empty fence (accepted
// only with SourceOperatorOverride). Its fields are backend.Fence's, so
// either converts to the other.
type Fence struct {
	LeaseID      string
	LeaseEpoch   uint64
	AttemptID    string
	AttemptIndex int
}

// epoch is the lease_epoch argument ("" for the empty fence).
func (f Fence) epoch() string {
	if f.LeaseEpoch == 0 {
		return ""
	}
	return strconv.FormatUint(f.LeaseEpoch, 10)
}

// mint fills empty lease and attempt ids with random UUIDs.
func mint(leaseID, attemptID *string) {
	if *leaseID == "" {
		*leaseID = model.NewUUID().String()
	}
	if *attemptID == "" {
		*attemptID = model.NewUUID().String()
	}
}

// Holder is what a lease-checked call's KEYS need from exec_core: lane_id,
// current_attempt_index and current_worker_instance_id, pre-read by the
// caller (or known by the lease holder).
type Holder struct {
	Lane             string
	AttemptIndex     int
	WorkerInstanceID string
}

// ClaimExecutionParams are the inputs of ff_claim_execution. A claim
// grant for WorkerID must exist (ff_issue_claim_grant).
type ClaimExecutionParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	// LaneID is the execution's lane (its eligible and active indexes).
	LaneID         string
	CapabilityHash string
	// LeaseID and AttemptID are minted (random UUIDs) by Call when empty.
	LeaseID   string
	AttemptID string
	// LeaseTTLMs is the lease lifetime; RenewBeforeMs 0 sends 2/3 of it.
	LeaseTTLMs    int64
	RenewBeforeMs int64
	// AttemptPolicyJSON is flattened into the attempt policy hash ("" sends
	// "{}").
	AttemptPolicyJSON string
	// AttemptTimeoutMs and ExecutionDeadlineAt index timeouts; 0 = none.
	AttemptTimeoutMs    int64
	ExecutionDeadlineAt int64
}

// Call builds ff_claim_execution. It fills in minted ids.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] lane eligible  KEYS[4] lease_expiry
//	KEYS[5] worker_leases(wiid)  KEYS[6..8] attempt hash/usage/policy (placeholders, idx 0)
//	KEYS[9] attempts  KEYS[10] lease_current  KEYS[11] lease_history  KEYS[12] lane active
//	KEYS[13] attempt_timeout  KEYS[14] execution_deadline
//	ARGV[1] execution_id  ARGV[2] worker_id  ARGV[3] worker_instance_id  ARGV[4] lane
//	ARGV[5] capability_hash  ARGV[6] lease_id  ARGV[7] lease_ttl_ms  ARGV[8] renew_before_ms
//	ARGV[9] attempt_id  ARGV[10] attempt_policy_json  ARGV[11] attempt_timeout_ms|""
//	ARGV[12] execution_deadline_at|""
func (p *ClaimExecutionParams) Call() Call {
	mint(&p.LeaseID, &p.AttemptID)
	renew := p.RenewBeforeMs
	if renew == 0 {
		renew = p.LeaseTTLMs * 2 / 3
	}
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	return Call{
		Function: "ff_claim_execution",
		Keys: []string{k.Core(), k.ClaimGrant(), pk.LaneEligible(p.LaneID), pk.LeaseExpiry(),
			pk.WorkerLeases(p.WorkerInstanceID), k.Attempt(0), k.AttemptUsage(0), k.AttemptPolicy(0),
			k.Attempts(), k.LeaseCurrent(), k.LeaseHistory(), pk.LaneActive(p.LaneID),
			pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, p.LaneID, p.CapabilityHash,
			p.LeaseID, itoa(p.LeaseTTLMs), itoa(renew), p.AttemptID,
			jsonOrEmptyObject(p.AttemptPolicyJSON), msOrEmpty(p.AttemptTimeoutMs), msOrEmpty(p.ExecutionDeadlineAt)},
	}
}

// ClaimResult is the lease a claim or reclaim acquired.
type ClaimResult struct {
	LeaseID      string
	LeaseEpoch   uint64
	ExpiresAt    int64
	AttemptID    string
	AttemptIndex int
	// AttemptType is initial, retry, replay or reclaim.
	AttemptType string
}

// DecodeClaim reads the reply of ff_claim_execution and
// ff_reclaim_execution: lease_id, epoch, expires_at, attempt_id,
// attempt_index, attempt_type.
func DecodeClaim(r *Reply) (*ClaimResult, error) {
	epoch, err := r.Int(1)
	if err != nil {
		return nil, err
	}
	exp, err := r.Int(2)
	if err != nil {
		return nil, err
	}
	idx, err := r.Int(4)
	if err != nil {
		return nil, err
	}
	return &ClaimResult{LeaseID: r.Field(0), LeaseEpoch: uint64(epoch), ExpiresAt: exp,
		AttemptID: r.Field(3), AttemptIndex: int(idx), AttemptType: r.Field(5)}, nil
}

// CompleteExecutionParams are the inputs of ff_complete_execution.
type CompleteExecutionParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	Holder      Holder
	// Result is stored in the result key when non-empty.
	Result string
	// Source is "" for workers or SourceOperatorOverride (empty fence).
	Source string
}

// Call builds ff_complete_execution.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] lease_expiry
//	KEYS[4] worker_leases(wiid)  KEYS[5] lane terminal  KEYS[6] lease_current
//	KEYS[7] lease_history  KEYS[8] lane active  KEYS[9] stream_meta(idx)  KEYS[10] result
//	KEYS[11] attempt_timeout  KEYS[12] execution_deadline
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch  ARGV[4] attempt_id
//	ARGV[5] result_payload  ARGV[6] source
func (p *CompleteExecutionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	h := p.Holder
	i := h.AttemptIndex
	return Call{
		Function: "ff_complete_execution",
		Keys: []string{k.Core(), k.Attempt(i), pk.LeaseExpiry(), pk.WorkerLeases(h.WorkerInstanceID),
			pk.LaneTerminal(h.Lane), k.LeaseCurrent(), k.LeaseHistory(), pk.LaneActive(h.Lane),
			k.StreamMeta(i), k.Result(), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{string(p.ExecutionID), p.Fence.LeaseID, p.Fence.epoch(), p.Fence.AttemptID,
			p.Result, p.Source},
	}
}

// DelayExecutionParams are the inputs of ff_delay_execution.
type DelayExecutionParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	Holder      Holder
	// DelayUntil is the server-ms time the execution becomes eligible again.
	DelayUntil int64
	Source     string
}

// Call builds ff_delay_execution.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] lease_current  KEYS[4] lease_history
//	KEYS[5] lease_expiry  KEYS[6] worker_leases  KEYS[7] lane active  KEYS[8] lane delayed
//	KEYS[9] attempt_timeout
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch  ARGV[4] attempt_id
//	ARGV[5] delay_until  ARGV[6] source
func (p *DelayExecutionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	h := p.Holder
	return Call{
		Function: "ff_delay_execution",
		Keys: []string{k.Core(), k.Attempt(h.AttemptIndex), k.LeaseCurrent(), k.LeaseHistory(),
			pk.LeaseExpiry(), pk.WorkerLeases(h.WorkerInstanceID), pk.LaneActive(h.Lane),
			pk.LaneDelayed(h.Lane), pk.AttemptTimeout()},
		Args: []string{string(p.ExecutionID), p.Fence.LeaseID, p.Fence.epoch(), p.Fence.AttemptID,
			itoa(p.DelayUntil), p.Source},
	}
}

// MoveToWaitingChildrenParams are the inputs of ff_move_to_waiting_children.
type MoveToWaitingChildrenParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	Holder      Holder
	Source      string
}

// Call builds ff_move_to_waiting_children.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] lease_current  KEYS[4] lease_history
//	KEYS[5] lease_expiry  KEYS[6] worker_leases  KEYS[7] lane active
//	KEYS[8] lane blocked:dependencies  KEYS[9] attempt_timeout
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch  ARGV[4] attempt_id  ARGV[5] source
func (p *MoveToWaitingChildrenParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	h := p.Holder
	return Call{
		Function: "ff_move_to_waiting_children",
		Keys: []string{k.Core(), k.Attempt(h.AttemptIndex), k.LeaseCurrent(), k.LeaseHistory(),
			pk.LeaseExpiry(), pk.WorkerLeases(h.WorkerInstanceID), pk.LaneActive(h.Lane),
			pk.LaneBlockedDependencies(h.Lane), pk.AttemptTimeout()},
		Args: []string{string(p.ExecutionID), p.Fence.LeaseID, p.Fence.epoch(), p.Fence.AttemptID, p.Source},
	}
}

// FailExecutionParams are the inputs of ff_fail_execution.
type FailExecutionParams struct {
	ExecutionID     model.ExecutionID
	Fence           Fence
	Holder          Holder
	FailureReason   string
	FailureCategory string
	// RetryPolicyJSON is the retry_policy object sent ("" = none:
	// terminal failure).
	RetryPolicyJSON string
	Source          string
}

// Call builds ff_fail_execution.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] lease_expiry  KEYS[4] worker_leases
//	KEYS[5] lane terminal  KEYS[6] lane delayed  KEYS[7] lease_current  KEYS[8] lease_history
//	KEYS[9] lane active  KEYS[10] stream_meta(idx)  KEYS[11] attempt_timeout
//	KEYS[12] execution_deadline
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch  ARGV[4] attempt_id
//	ARGV[5] failure_reason  ARGV[6] failure_category  ARGV[7] retry_policy_json|""  ARGV[8] source
func (p *FailExecutionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	h := p.Holder
	i := h.AttemptIndex
	return Call{
		Function: "ff_fail_execution",
		Keys: []string{k.Core(), k.Attempt(i), pk.LeaseExpiry(), pk.WorkerLeases(h.WorkerInstanceID),
			pk.LaneTerminal(h.Lane), pk.LaneDelayed(h.Lane), k.LeaseCurrent(), k.LeaseHistory(),
			pk.LaneActive(h.Lane), k.StreamMeta(i), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{string(p.ExecutionID), p.Fence.LeaseID, p.Fence.epoch(), p.Fence.AttemptID,
			p.FailureReason, p.FailureCategory, p.RetryPolicyJSON, p.Source},
	}
}

// DecodeFail reads ff_fail_execution's reply: whether a retry was
// scheduled, and when it becomes eligible.
func DecodeFail(r *Reply) (retryScheduled bool, delayUntil int64, err error) {
	if r.Field(0) != "retry_scheduled" {
		return false, 0, nil
	}
	until, err := r.Int(1)
	if err != nil {
		return false, 0, err
	}
	return true, until, nil
}

// DefaultMaxReclaimCount caps the reclaims of an execution whose policy
// sets no max_reclaim_count: what FlowFabric sends as ff_reclaim_execution's
// default_max_reclaim_count, and the Postgres driver's cap.
const DefaultMaxReclaimCount = 1000

// ReclaimExecutionParams are the inputs of ff_reclaim_execution. A
// reclaim grant for WorkerID must exist (ff_issue_reclaim_grant).
type ReclaimExecutionParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	LaneID           string
	// LeaseID and AttemptID are minted by Call when empty.
	LeaseID           string
	AttemptID         string
	LeaseTTLMs        int64
	AttemptPolicyJSON string
	// MaxReclaimCount caps reclaims when the stored policy sets none; 0
	// sends 1000 as FlowFabric does.
	MaxReclaimCount int
	// OldAttemptIndex is exec_core's current_attempt_index, pre-read.
	OldAttemptIndex int
}

// Call builds ff_reclaim_execution. It fills in minted ids.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] old attempt hash  KEYS[4] old stream_meta
//	KEYS[5] new attempt hash  KEYS[6] new attempt usage  KEYS[7] attempts  KEYS[8] lease_current
//	KEYS[9] lease_history  KEYS[10] lease_expiry  KEYS[11] worker_leases(new worker)
//	KEYS[12] lane active  KEYS[13] attempt_timeout  KEYS[14] execution_deadline
//	ARGV[1] execution_id  ARGV[2] worker_id  ARGV[3] worker_instance_id  ARGV[4] lane
//	ARGV[5] lease_id  ARGV[6] lease_ttl_ms  ARGV[7] attempt_id  ARGV[8] attempt_policy_json
//	ARGV[9] default_max_reclaim_count
func (p *ReclaimExecutionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	mint(&p.LeaseID, &p.AttemptID)
	old := p.OldAttemptIndex
	maxRec := p.MaxReclaimCount
	if maxRec == 0 {
		maxRec = DefaultMaxReclaimCount
	}
	return Call{
		Function: "ff_reclaim_execution",
		Keys: []string{k.Core(), k.ClaimGrant(), k.Attempt(old), k.StreamMeta(old), k.Attempt(old + 1),
			k.AttemptUsage(old + 1), k.Attempts(), k.LeaseCurrent(), k.LeaseHistory(), pk.LeaseExpiry(),
			pk.WorkerLeases(p.WorkerInstanceID), pk.LaneActive(p.LaneID), pk.AttemptTimeout(),
			pk.ExecutionDeadline()},
		Args: []string{string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, p.LaneID, p.LeaseID,
			itoa(p.LeaseTTLMs), p.AttemptID, jsonOrEmptyObject(p.AttemptPolicyJSON), strconv.Itoa(maxRec)},
	}
}

// SetExecutionTagsParams are the inputs of ff_set_execution_tags.
type SetExecutionTagsParams struct {
	ExecutionID model.ExecutionID
	// Tags are caller tags, keys "<caller>.<field>"; sent sorted by key.
	Tags map[string]string
}

// Call builds ff_set_execution_tags.
//
//	KEYS[1] exec_core  KEYS[2] tags
//	ARGV[2i-1] key_i  ARGV[2i] value_i (sorted by key)
func (p *SetExecutionTagsParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	return Call{Function: "ff_set_execution_tags", Keys: []string{k.Core(), k.Tags()}, Args: sortedPairs(p.Tags)}
}

// DecodeSetTags reads ff_set_execution_tags' and ff_set_flow_tags'
// reply: the number of pairs written.
func DecodeSetTags(r *Reply) (int, error) {
	n, err := r.Int(0)
	return int(n), err
}
