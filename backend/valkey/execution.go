package valkey

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fabric-host/fabric/model"
)

// DefaultDedupTTL is the create-idempotency window FlowFabric uses when an
// idempotency key is given (24 h).
const DefaultDedupTTL = 24 * time.Hour

// Reply statuses of the execution family.
const (
	// StatusDuplicate is ff_create_execution's status for an execution that
	// already exists (by id or by idempotency key).
	StatusDuplicate = "DUPLICATE"
)

func msStr(ms int64) string {
	if ms == 0 {
		return ""
	}
	return strconv.FormatInt(ms, 10)
}

func partitionIndex(eid model.ExecutionID) string {
	return strconv.FormatUint(uint64(eid.Partition().Index), 10)
}

// CreateExecutionParams are the inputs of ff_create_execution. The caller
// mints ExecutionID (model.PartitionConfig.NewSoloExecutionID or
// NewFlowExecutionID); nothing here generates ids.
type CreateExecutionParams struct {
	ExecutionID     model.ExecutionID
	Namespace       string
	LaneID          string
	ExecutionKind   string
	Priority        int
	CreatorIdentity string
	// PolicyJSON is the ExecutionPolicy document; "" sends "{}" as
	// FlowFabric does when there is no policy.
	PolicyJSON string
	// Payload is the opaque input payload; empty stores nothing.
	Payload string
	// DelayUntil, in server ms, delays the first claim; 0 means none.
	DelayUntil int64
	// IdempotencyKey makes the create idempotent within its partition for
	// DedupTTL (DefaultDedupTTL when zero).
	IdempotencyKey string
	DedupTTL       time.Duration
	// Tags are written to the tags hash.
	Tags map[string]string
	// ExecutionDeadlineAt, in server ms, indexes an absolute deadline; 0
	// means none.
	ExecutionDeadlineAt int64
}

// Call builds the FCALL of ff_create_execution.
//
//	KEYS[1] exec_core          KEYS[5] lane eligible (or delayed when DelayUntil>0)
//	KEYS[2] payload            KEYS[6] idempotency key (or ff:noop:{fp:N})
//	KEYS[3] policy             KEYS[7] execution_deadline
//	KEYS[4] tags               KEYS[8] all_executions
//	ARGV[1] execution_id  ARGV[2] namespace  ARGV[3] lane_id  ARGV[4] execution_kind
//	ARGV[5] priority  ARGV[6] creator_identity  ARGV[7] policy_json  ARGV[8] payload
//	ARGV[9] delay_until|""  ARGV[10] dedup_ttl_ms|""  ARGV[11] tags_json
//	ARGV[12] execution_deadline_at|""  ARGV[13] partition index
func (p *CreateExecutionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	sched := pk.LaneEligible(p.LaneID)
	if p.DelayUntil > 0 {
		sched = pk.LaneDelayed(p.LaneID)
	}
	idem, ttl := pk.Noop(), ""
	if p.IdempotencyKey != "" {
		idem = pk.Idempotency(p.Namespace, p.IdempotencyKey)
		d := p.DedupTTL
		if d <= 0 {
			d = DefaultDedupTTL
		}
		ttl = strconv.FormatInt(d.Milliseconds(), 10)
	}
	policy := p.PolicyJSON
	if policy == "" {
		policy = "{}"
	}
	tags := "{}"
	if len(p.Tags) > 0 {
		b, _ := json.Marshal(p.Tags) // map[string]string always marshals
		tags = string(b)
	}
	return Call{
		Function: "ff_create_execution",
		Keys: []string{k.Core(), k.Payload(), k.Policy(), k.Tags(), sched, idem,
			pk.ExecutionDeadline(), pk.AllExecutions()},
		Args: []string{string(p.ExecutionID), p.Namespace, p.LaneID, p.ExecutionKind,
			strconv.Itoa(p.Priority), p.CreatorIdentity, policy, p.Payload,
			msStr(p.DelayUntil), ttl, tags, msStr(p.ExecutionDeadlineAt),
			partitionIndex(p.ExecutionID)},
	}
}

// CreateExecutionResult is the reply of ff_create_execution.
type CreateExecutionResult struct {
	// ExecutionID is the created id, or on a duplicate the id stored under
	// the idempotency key (which may differ from the one sent).
	ExecutionID model.ExecutionID
	// PublicState is "waiting" or "delayed"; empty on a duplicate.
	PublicState string
	// Duplicate reports that nothing was created.
	Duplicate bool
}

// CreateExecution creates an execution (ff_create_execution): exec_core,
// payload, policy, tags and the scheduling indexes. It is idempotent by id
// and, with an IdempotencyKey, by key.
func (c *Client) CreateExecution(ctx context.Context, p *CreateExecutionParams) (*CreateExecutionResult, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("create execution %s: %w", p.ExecutionID, err)
	}
	res := &CreateExecutionResult{ExecutionID: model.ExecutionID(rep.Field(0))}
	if rep.Status == StatusDuplicate {
		res.Duplicate = true
		return res, nil
	}
	res.PublicState = rep.Field(1)
	return res, nil
}

// ExecutionCore returns the exec_core hash of eid as a map (HGETALL); an
// absent execution yields an error matching CodeExecutionNotFound.
func (c *Client) ExecutionCore(ctx context.Context, eid model.ExecutionID) (map[string]string, error) {
	m, err := c.c.Do(ctx, c.c.B().Hgetall().Key(model.KeysFor(eid).Core()).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("read exec_core %s: %w", eid, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("read exec_core %s: %w", eid, CodeExecutionNotFound)
	}
	return m, nil
}

// LeaseFence is the (lease_id, lease_epoch, attempt_id) triple that fences
// a lease-checked call. The zero value is the empty fence, accepted only
// with Source "operator_override".
type LeaseFence struct {
	LeaseID    string
	LeaseEpoch uint64
	AttemptID  string
}

func (f LeaseFence) epoch() string {
	if f.LeaseEpoch == 0 {
		return ""
	}
	return strconv.FormatUint(f.LeaseEpoch, 10)
}

// SourceOperatorOverride is the source that lets an empty fence through
// complete, fail, delay, move-to-waiting-children and cancel.
const SourceOperatorOverride = "operator_override"

// execRefs are the exec_core fields callers pre-read (HMGET) to build the
// KEYS of lease-checked calls.
type execRefs struct {
	lane, attemptIndex, workerInstanceID, waitpointID string
}

func (r execRefs) attemptIdx() int {
	n, _ := strconv.Atoi(r.attemptIndex)
	return n
}

// preread HMGETs lane_id, current_attempt_index, current_worker_instance_id
// and current_waitpoint_id. An absent execution yields empty refs; the Lua
// then answers execution_not_found.
func (c *Client) preread(ctx context.Context, eid model.ExecutionID) (execRefs, error) {
	vals, err := c.c.Do(ctx, c.c.B().Hmget().Key(model.KeysFor(eid).Core()).
		Field("lane_id", "current_attempt_index", "current_worker_instance_id", "current_waitpoint_id").
		Build()).ToArray()
	if err != nil {
		return execRefs{}, fmt.Errorf("pre-read exec_core %s: %w", eid, err)
	}
	s := make([]string, 4)
	for i := range s {
		if i < len(vals) {
			s[i], _ = vals[i].ToString()
		}
	}
	return execRefs{lane: s[0], attemptIndex: s[1], workerInstanceID: s[2], waitpointID: s[3]}, nil
}

// ClaimExecutionParams are the inputs of ff_claim_execution. A claim grant
// for WorkerID must exist (IssueClaimGrant).
type ClaimExecutionParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	// LaneID is the execution's lane (its eligible and active indexes).
	LaneID         string
	CapabilityHash string
	// LeaseID and AttemptID are minted (random UUIDs) when empty.
	LeaseID   string
	AttemptID string
	// LeaseTTLMs is the lease lifetime; RenewBeforeMs defaults to 2/3 of it.
	LeaseTTLMs    int64
	RenewBeforeMs int64
	// AttemptPolicyJSON is flattened into the attempt policy hash ("{}" when
	// empty).
	AttemptPolicyJSON string
	// AttemptTimeoutMs and ExecutionDeadlineAt index timeouts; 0 = none.
	AttemptTimeoutMs    int64
	ExecutionDeadlineAt int64
}

// Call builds the FCALL of ff_claim_execution. It fills in minted ids.
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
	if p.LeaseID == "" {
		p.LeaseID = model.NewUUID().String()
	}
	if p.AttemptID == "" {
		p.AttemptID = model.NewUUID().String()
	}
	renew := p.RenewBeforeMs
	if renew == 0 {
		renew = p.LeaseTTLMs * 2 / 3
	}
	policy := p.AttemptPolicyJSON
	if policy == "" {
		policy = "{}"
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
			p.LeaseID, strconv.FormatInt(p.LeaseTTLMs, 10), strconv.FormatInt(renew, 10), p.AttemptID,
			policy, msStr(p.AttemptTimeoutMs), msStr(p.ExecutionDeadlineAt)},
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

// Fence returns the fence of the acquired lease.
func (r *ClaimResult) Fence() LeaseFence {
	return LeaseFence{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch, AttemptID: r.AttemptID}
}

func parseClaim(rep *Reply) (*ClaimResult, error) {
	epoch, err := rep.Int(1)
	if err != nil {
		return nil, err
	}
	exp, err := rep.Int(2)
	if err != nil {
		return nil, err
	}
	idx, err := rep.Int(4)
	if err != nil {
		return nil, err
	}
	return &ClaimResult{LeaseID: rep.Field(0), LeaseEpoch: uint64(epoch), ExpiresAt: exp,
		AttemptID: rep.Field(3), AttemptIndex: int(idx), AttemptType: rep.Field(5)}, nil
}

// ClaimExecution consumes the worker's claim grant and starts a new attempt
// under a new lease (ff_claim_execution): runnable → active.
// An interrupted attempt yields use_claim_resumed_execution with the grant
// left in place.
func (c *Client) ClaimExecution(ctx context.Context, p *ClaimExecutionParams) (*ClaimResult, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("claim execution %s: %w", p.ExecutionID, err)
	}
	res, err := parseClaim(rep)
	if err != nil {
		return nil, fmt.Errorf("claim execution %s: %w", p.ExecutionID, err)
	}
	return res, nil
}

// CompleteExecutionParams are the inputs of ff_complete_execution.
type CompleteExecutionParams struct {
	ExecutionID model.ExecutionID
	Fence       LeaseFence
	// Result is stored in the result key when non-empty.
	Result string
	// Source is "" for workers or SourceOperatorOverride (empty fence).
	Source string
}

func (p *CompleteExecutionParams) call(r execRefs) Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	i := r.attemptIdx()
	return Call{
		Function: "ff_complete_execution",
		Keys: []string{k.Core(), k.Attempt(i), pk.LeaseExpiry(), pk.WorkerLeases(r.workerInstanceID),
			pk.LaneTerminal(r.lane), k.LeaseCurrent(), k.LeaseHistory(), pk.LaneActive(r.lane),
			k.StreamMeta(i), k.Result(), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{string(p.ExecutionID), p.Fence.LeaseID, p.Fence.epoch(), p.Fence.AttemptID,
			p.Result, p.Source},
	}
}

// CompleteExecution ends the active attempt successfully
// (ff_complete_execution): active → terminal/success, lease released,
// result stored, and a flow member's completion published on
// ff:dag:completions. It pre-reads lane_id, current_attempt_index and
// current_worker_instance_id to build its KEYS.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] lease_expiry
//	KEYS[4] worker_leases(wiid)  KEYS[5] lane terminal  KEYS[6] lease_current
//	KEYS[7] lease_history  KEYS[8] lane active  KEYS[9] stream_meta(idx)  KEYS[10] result
//	KEYS[11] attempt_timeout  KEYS[12] execution_deadline
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch  ARGV[4] attempt_id
//	ARGV[5] result_payload  ARGV[6] source
func (c *Client) CompleteExecution(ctx context.Context, p *CompleteExecutionParams) error {
	r, err := c.preread(ctx, p.ExecutionID)
	if err != nil {
		return err
	}
	call := p.call(r)
	if _, err := c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return fmt.Errorf("complete execution %s: %w", p.ExecutionID, err)
	}
	return nil
}
