package valkey

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// DefaultDedupTTL is the create-idempotency window FlowFabric uses when an
// idempotency key is given (24 h).
const DefaultDedupTTL = fcall.DefaultDedupTTLMs * time.Millisecond

// Reply statuses of the execution family.
const (
	// StatusDuplicate is ff_create_execution's status for an execution that
	// already exists (by id or by idempotency key).
	StatusDuplicate = fcall.StatusDuplicate
)

func msStr(ms int64) string {
	if ms == 0 {
		return ""
	}
	return strconv.FormatInt(ms, 10)
}

// CreateExecutionParams are the inputs of ff_create_execution, the
// idempotency window a time.Duration (DefaultDedupTTL when not positive).
// The caller mints ExecutionID (model.PartitionConfig.NewSoloExecutionID
// or NewFlowExecutionID); nothing here generates ids.
type CreateExecutionParams = fcall.CreateExecutionParams[time.Duration]

// CreateExecutionResult is the reply of ff_create_execution.
type CreateExecutionResult = fcall.CreateExecutionResult

// CreateExecution creates an execution (ff_create_execution): exec_core,
// payload, policy, tags and the scheduling indexes. It is idempotent by id
// and, with an IdempotencyKey, by key.
//
// p is checked first as the driver checks it (backend.ValidateCreateExecution,
// with the client's payload limit), but for a deadline already past, which
// the deadline scanner expires; a refusal wraps backend.ErrInvalidInput.
func (c *Client) CreateExecution(ctx context.Context, p *CreateExecutionParams) (*CreateExecutionResult, error) {
	if err := backend.ValidateCreateExecution(&backend.CreateExecutionParams{ExecutionID: p.ExecutionID,
		Namespace: p.Namespace, LaneID: p.LaneID, ExecutionKind: p.ExecutionKind, CreatorIdentity: p.CreatorIdentity,
		PolicyJSON: p.PolicyJSON, Payload: []byte(p.Payload), DelayUntil: p.DelayUntil, IdempotencyKey: p.IdempotencyKey,
		Tags: p.Tags, ExecutionDeadlineAt: p.ExecutionDeadlineAt}, c.maxPayload, 0); err != nil {
		return nil, err
	}
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("create execution %s: %w", p.ExecutionID, err)
	}
	return fcall.DecodeCreateExecution(rep), nil
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
// with Source "operator_override". It is backend.Fence, the one fence
// type of both drivers; Valkey ignores its AttemptIndex (the library
// checks the attempt id).
type LeaseFence = backend.Fence

// fenceEpoch is the lease_epoch argument of a fenced call ("" for the
// empty fence).
func fenceEpoch(f LeaseFence) string {
	if f.LeaseEpoch == 0 {
		return ""
	}
	return strconv.FormatUint(f.LeaseEpoch, 10)
}

// SourceOperatorOverride is the source that lets an empty fence through
// complete, fail, delay, move-to-waiting-children and cancel.
const SourceOperatorOverride = fcall.SourceOperatorOverride

// execRefs are the exec_core fields callers pre-read (HMGET) to build the
// KEYS of lease-checked calls.
type execRefs struct {
	lane, attemptIndex, workerInstanceID, waitpointID string
}

func (r execRefs) attemptIdx() int {
	n, _ := strconv.Atoi(r.attemptIndex)
	return n
}

// holder is the fcall.Holder of the pre-read refs.
func (r execRefs) holder() fcall.Holder {
	return fcall.Holder{Lane: r.lane, AttemptIndex: r.attemptIdx(), WorkerInstanceID: r.workerInstanceID}
}

// fcallFence is f as model/fcall's Fence.
func fcallFence(f LeaseFence) fcall.Fence { return fcall.Fence(f) }

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

// ClaimExecutionParams are the inputs of ff_claim_execution; its Call
// fills in minted ids.
type ClaimExecutionParams = fcall.ClaimExecutionParams

// ClaimResult is the lease a claim or reclaim acquired.
type ClaimResult fcall.ClaimResult

// Fence returns the fence of the acquired lease.
func (r *ClaimResult) Fence() LeaseFence {
	return LeaseFence{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch, AttemptID: r.AttemptID, AttemptIndex: r.AttemptIndex}
}

func parseClaim(rep *Reply) (*ClaimResult, error) {
	r, err := fcall.DecodeClaim(rep)
	return (*ClaimResult)(r), err
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
	return (&fcall.CompleteExecutionParams{ExecutionID: p.ExecutionID, Fence: fcallFence(p.Fence), Holder: r.holder(),
		Result: p.Result, Source: p.Source}).Call()
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

// CancelExecutionParams are the inputs of ff_cancel_execution; CancelExecution
// fills in the pre-read fields.
type CancelExecutionParams = fcall.CancelExecutionParams

// cancelCall is p's call with r's pre-read fields; a missing waitpoint
// gets a fresh random id, as FlowFabric sends (the Lua guards with EXISTS).
func cancelCall(p *CancelExecutionParams, r execRefs) Call {
	q := *p
	q.Lane, q.AttemptIndex, q.WaitpointID, q.WorkerInstanceID = r.lane, r.attemptIdx(), r.waitpointID, r.workerInstanceID
	if q.WaitpointID == "" {
		q.WaitpointID = model.NewUUID().String()
	}
	return q.Call()
}

// CancelExecution cancels an execution from any non-terminal phase
// (ff_cancel_execution) and returns the phase it was cancelled from. It
// pre-reads lane_id, current_attempt_index, current_waitpoint_id and
// current_worker_instance_id to build its KEYS.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] stream_meta(idx)  KEYS[4] lease_current
//	KEYS[5] lease_history  KEYS[6] lease_expiry  KEYS[7] worker_leases(holder)
//	KEYS[8] suspension_current  KEYS[9] waitpoint  KEYS[10] waitpoint condition
//	KEYS[11] suspension_timeout  KEYS[12] lane terminal  KEYS[13] attempt_timeout
//	KEYS[14] execution_deadline  KEYS[15] lane eligible  KEYS[16] lane delayed
//	KEYS[17..21] lane blocked:dependencies, budget, quota, route, operator
//	ARGV[1] execution_id  ARGV[2] reason  ARGV[3] source  ARGV[4] lease_id  ARGV[5] lease_epoch
func (c *Client) CancelExecution(ctx context.Context, p *CancelExecutionParams) (string, error) {
	r, err := c.preread(ctx, p.ExecutionID)
	if err != nil {
		return "", err
	}
	call := cancelCall(p, r)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", fmt.Errorf("cancel execution %s: %w", p.ExecutionID, err)
	}
	return fcall.DecodeCancelExecution(rep), nil
}

// DelayExecutionParams are the inputs of ff_delay_execution.
type DelayExecutionParams struct {
	ExecutionID model.ExecutionID
	Fence       LeaseFence
	// DelayUntil is the server-ms time the execution becomes eligible again.
	DelayUntil int64
	Source     string
}

func (p *DelayExecutionParams) call(r execRefs) Call {
	return (&fcall.DelayExecutionParams{ExecutionID: p.ExecutionID, Fence: fcallFence(p.Fence), Holder: r.holder(),
		DelayUntil: p.DelayUntil, Source: p.Source}).Call()
}

// DelayExecution parks the caller's active execution until DelayUntil
// (ff_delay_execution); the same attempt continues after the delay.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] lease_current  KEYS[4] lease_history
//	KEYS[5] lease_expiry  KEYS[6] worker_leases  KEYS[7] lane active  KEYS[8] lane delayed
//	KEYS[9] attempt_timeout
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch  ARGV[4] attempt_id
//	ARGV[5] delay_until  ARGV[6] source
func (c *Client) DelayExecution(ctx context.Context, p *DelayExecutionParams) error {
	r, err := c.preread(ctx, p.ExecutionID)
	if err != nil {
		return err
	}
	call := p.call(r)
	if _, err := c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return fmt.Errorf("delay execution %s: %w", p.ExecutionID, err)
	}
	return nil
}

// MoveToWaitingChildrenParams are the inputs of ff_move_to_waiting_children.
type MoveToWaitingChildrenParams struct {
	ExecutionID model.ExecutionID
	Fence       LeaseFence
	Source      string
}

func (p *MoveToWaitingChildrenParams) call(r execRefs) Call {
	return (&fcall.MoveToWaitingChildrenParams{ExecutionID: p.ExecutionID, Fence: fcallFence(p.Fence),
		Holder: r.holder(), Source: p.Source}).Call()
}

// MoveToWaitingChildren releases the caller's lease and blocks the
// execution on its dependencies (ff_move_to_waiting_children).
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] lease_current  KEYS[4] lease_history
//	KEYS[5] lease_expiry  KEYS[6] worker_leases  KEYS[7] lane active
//	KEYS[8] lane blocked:dependencies  KEYS[9] attempt_timeout
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch  ARGV[4] attempt_id  ARGV[5] source
func (c *Client) MoveToWaitingChildren(ctx context.Context, p *MoveToWaitingChildrenParams) error {
	r, err := c.preread(ctx, p.ExecutionID)
	if err != nil {
		return err
	}
	call := p.call(r)
	if _, err := c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return fmt.Errorf("move to waiting children %s: %w", p.ExecutionID, err)
	}
	return nil
}

// FailExecutionParams are the inputs of ff_fail_execution.
type FailExecutionParams struct {
	ExecutionID     model.ExecutionID
	Fence           LeaseFence
	FailureReason   string
	FailureCategory string
	// RetryPolicyJSON is the retry_policy object; when empty, FailExecution
	// reads it from the stored ExecutionPolicy (none → terminal failure).
	RetryPolicyJSON string
	Source          string
}

func (p *FailExecutionParams) call(r execRefs, retryPolicy string) Call {
	return (&fcall.FailExecutionParams{ExecutionID: p.ExecutionID, Fence: fcallFence(p.Fence), Holder: r.holder(),
		FailureReason: p.FailureReason, FailureCategory: p.FailureCategory, RetryPolicyJSON: retryPolicy,
		Source: p.Source}).Call()
}

// FailResult is the outcome of FailExecution (defined once in package
// backend): RetryScheduled reports a retry, eligible at DelayUntil.
type FailResult = backend.FailResult

// FailExecution fails the active attempt (ff_fail_execution): with retries
// left the execution is delayed by the policy's backoff and the next claim
// creates a retry attempt; otherwise it fails terminally and a flow member's
// failure is published.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] lease_expiry  KEYS[4] worker_leases
//	KEYS[5] lane terminal  KEYS[6] lane delayed  KEYS[7] lease_current  KEYS[8] lease_history
//	KEYS[9] lane active  KEYS[10] stream_meta(idx)  KEYS[11] attempt_timeout
//	KEYS[12] execution_deadline
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch  ARGV[4] attempt_id
//	ARGV[5] failure_reason  ARGV[6] failure_category  ARGV[7] retry_policy_json|""  ARGV[8] source
func (c *Client) FailExecution(ctx context.Context, p *FailExecutionParams) (*FailResult, error) {
	r, err := c.preread(ctx, p.ExecutionID)
	if err != nil {
		return nil, err
	}
	retry := p.RetryPolicyJSON
	if retry == "" {
		if retry, err = c.storedRetryPolicy(ctx, p.ExecutionID); err != nil {
			return nil, err
		}
	}
	call := p.call(r, retry)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("fail execution %s: %w", p.ExecutionID, err)
	}
	retried, until, err := fcall.DecodeFail(rep)
	if err != nil {
		return nil, fmt.Errorf("fail execution %s: %w", p.ExecutionID, err)
	}
	return &FailResult{RetryScheduled: retried, DelayUntil: until}, nil
}

// storedRetryPolicy returns the retry_policy object of the stored policy as
// JSON, or "" when there is none.
func (c *Client) storedRetryPolicy(ctx context.Context, eid model.ExecutionID) (string, error) {
	raw, err := c.c.Do(ctx, c.c.B().Get().Key(model.KeysFor(eid).Policy()).Build()).ToString()
	if err != nil {
		if vk.IsValkeyNil(err) {
			return "", nil
		}
		return "", fmt.Errorf("read policy %s: %w", eid, err)
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &doc) != nil {
		return "", nil
	}
	rp := doc["retry_policy"]
	if len(rp) == 0 || string(rp) == "null" {
		return "", nil
	}
	return string(rp), nil
}

// ReclaimExecutionParams are the inputs of ff_reclaim_execution;
// ReclaimExecution fills in the pre-read OldAttemptIndex and minted ids.
type ReclaimExecutionParams = fcall.ReclaimExecutionParams

// reclaimCall is p's call on r's attempt index; minted ids land in p.
func reclaimCall(p *ReclaimExecutionParams, r execRefs) Call {
	q := *p
	q.OldAttemptIndex = r.attemptIdx()
	call := q.Call()
	p.LeaseID, p.AttemptID = q.LeaseID, q.AttemptID
	return call
}

// ReclaimExecution takes over an expired or revoked lease with a new
// "reclaim" attempt (ff_reclaim_execution). Past the reclaim cap the
// execution fails terminally and the error is max_retries_exhausted with
// the enforced cap as detail.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] old attempt hash  KEYS[4] old stream_meta
//	KEYS[5] new attempt hash  KEYS[6] new attempt usage  KEYS[7] attempts  KEYS[8] lease_current
//	KEYS[9] lease_history  KEYS[10] lease_expiry  KEYS[11] worker_leases(new worker)
//	KEYS[12] lane active  KEYS[13] attempt_timeout  KEYS[14] execution_deadline
//	ARGV[1] execution_id  ARGV[2] worker_id  ARGV[3] worker_instance_id  ARGV[4] lane
//	ARGV[5] lease_id  ARGV[6] lease_ttl_ms  ARGV[7] attempt_id  ARGV[8] attempt_policy_json
//	ARGV[9] default_max_reclaim_count
func (c *Client) ReclaimExecution(ctx context.Context, p *ReclaimExecutionParams) (*ClaimResult, error) {
	r, err := c.preread(ctx, p.ExecutionID)
	if err != nil {
		return nil, err
	}
	call := reclaimCall(p, r)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("reclaim execution %s: %w", p.ExecutionID, err)
	}
	res, err := parseClaim(rep)
	if err != nil {
		return nil, fmt.Errorf("reclaim execution %s: %w", p.ExecutionID, err)
	}
	return res, nil
}

// Expire reasons of ff_expire_execution.
const (
	ExpireAttemptTimeout    = fcall.ExpireAttemptTimeout
	ExpireExecutionDeadline = fcall.ExpireExecutionDeadline
)

// ExpireExecutionParams are the inputs of ff_expire_execution;
// ExpireExecution fills in the pre-read lane and attempt index.
type ExpireExecutionParams = fcall.ExpireExecutionParams

// ExpireResult is the outcome of ExpireExecution.
type ExpireResult = fcall.ExpireResult

// ExpireExecution expires an execution on a timeout (ff_expire_execution),
// as the attempt-timeout and execution-deadline scanners do; it passes the
// unknown-owner worker set and pre-reads lane_id and current_attempt_index.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] stream_meta(idx)  KEYS[4] lease_current
//	KEYS[5] lease_history  KEYS[6] lease_expiry  KEYS[7] worker_leases("")  KEYS[8] lane active
//	KEYS[9] lane terminal  KEYS[10] attempt_timeout  KEYS[11] execution_deadline
//	KEYS[12] lane suspended  KEYS[13] suspension_timeout  KEYS[14] suspension_current
//	ARGV[1] execution_id  ARGV[2] expire_reason
func (c *Client) ExpireExecution(ctx context.Context, p *ExpireExecutionParams) (*ExpireResult, error) {
	r, err := c.preread(ctx, p.ExecutionID)
	if err != nil {
		return nil, err
	}
	q := *p
	q.Lane, q.AttemptIndex = r.lane, r.attemptIdx()
	call := q.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("expire execution %s: %w", p.ExecutionID, err)
	}
	return fcall.DecodeExpireExecution(rep), nil
}

// SetExecutionTags writes caller tags (keys "<caller>.<field>") into the
// execution's tags hash (ff_set_execution_tags) and returns the number of
// pairs written. A bad key fails the whole call with invalid_tag_key.
//
//	KEYS[1] exec_core  KEYS[2] tags
//	ARGV[2i-1] key_i  ARGV[2i] value_i (sorted by key here)
func (c *Client) SetExecutionTags(ctx context.Context, eid model.ExecutionID, tags map[string]string) (int, error) {
	call := (&fcall.SetExecutionTagsParams{ExecutionID: eid, Tags: tags}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, fmt.Errorf("set execution tags %s: %w", eid, err)
	}
	n, err := fcall.DecodeSetTags(rep)
	if err != nil {
		return 0, fmt.Errorf("set execution tags %s: %w", eid, err)
	}
	return n, nil
}
