package valkey

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// schedMS renders a millisecond count as ARGV text.
func schedMS(v int64) string { return strconv.FormatInt(v, 10) }

// schedOptMS renders an optional millisecond value: 0 becomes "" (absent).
func schedOptMS(v int64) string {
	if v == 0 {
		return ""
	}
	return schedMS(v)
}

// schedWrap adds the function name to a transport or decode error; *LuaError
// already names its function and is returned as is.
func schedWrap(fn string, err error) error {
	if err == nil {
		return nil
	}
	if CodeOf(err) != "" {
		return err
	}
	return fmt.Errorf("%s: %w", fn, err)
}

// IssueClaimGrantParams are the inputs of ff_issue_claim_grant.
type IssueClaimGrantParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	// Lane is the execution's lane; its eligible index is KEYS[3].
	Lane           string
	CapabilityHash string
	// GrantTTLMs is the grant lifetime; the SDK and backend claim use 5000.
	GrantTTLMs         int64
	RouteSnapshotJSON  string
	AdmissionSummary   string
	WorkerCapabilities []string
}

// IssueClaimGrant reserves an eligible execution for one worker by writing
// its claim_grant hash with PEXPIREAT now+ttl. It does not remove the
// execution from the eligible set. On capability_mismatch the core's
// last_capability_mismatch_at is stamped and the *LuaError detail is the
// sorted CSV of missing capabilities.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] lane_eligible(lane)
//	ARGV[1] execution_id  ARGV[2] worker_id  ARGV[3] worker_instance_id
//	ARGV[4] lane_id  ARGV[5] capability_hash  ARGV[6] grant_ttl_ms
//	ARGV[7] route_snapshot_json  ARGV[8] admission_summary
//	ARGV[9] worker_capabilities_csv (sorted)
//
// Reply: ok(execution_id).
func (c *Client) IssueClaimGrant(ctx context.Context, p *IssueClaimGrantParams) error {
	const fn = "ff_issue_claim_grant"
	k := model.KeysFor(p.ExecutionID)
	idx := model.KeysOn(k.Partition())
	keys := []string{k.Core(), k.ClaimGrant(), idx.LaneEligible(p.Lane)}
	args := []string{
		string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, p.Lane, p.CapabilityHash,
		schedMS(p.GrantTTLMs), p.RouteSnapshotJSON, p.AdmissionSummary, CapabilityCSV(p.WorkerCapabilities),
	}
	_, err := c.FCall(ctx, fn, keys, args)
	return schedWrap(fn, err)
}

// CapabilityCSV renders capabilities as FlowFabric's sorted, de-duplicated
// CSV (empty tokens dropped).
func CapabilityCSV(caps []string) string {
	set := make(map[string]bool, len(caps))
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		if c != "" && !set[c] {
			set[c] = true
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// PromoteStatus is the sub-status of ff_promote_delayed.
type PromoteStatus = fcall.PromoteStatus

// ff_promote_delayed outcomes.
const (
	PromotePromoted           = fcall.PromotePromoted
	PromoteNotYetDue          = fcall.PromoteNotYetDue
	PromoteNotFoundCleaned    = fcall.PromoteNotFoundCleaned
	PromoteNotRunnableCleaned = fcall.PromoteNotRunnableCleaned
	PromoteNotDelayedCleaned  = fcall.PromoteNotDelayedCleaned
)

// PromoteDelayedParams are the inputs of ff_promote_delayed.
type PromoteDelayedParams = fcall.PromoteDelayedParams

// PromoteDelayed moves a delayed execution whose delay_until has passed
// back to the eligible set (runnable / eligible_now / waiting_for_worker,
// attempt_state untouched). Stale index members are removed from
// lane:delayed with one of the *_cleaned statuses.
//
//	KEYS[1] exec_core  KEYS[2] lane_delayed(lane)  KEYS[3] lane_eligible(lane)
//	ARGV[1] execution_id  ARGV[2] now_ms
//
// Reply: ok(status).
func (c *Client) PromoteDelayed(ctx context.Context, p *PromoteDelayedParams) (PromoteStatus, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", schedWrap(call.Function, err)
	}
	return fcall.DecodePromoteDelayed(rep), nil
}

// schedHGet reads one exec_core field for a wrapper's documented pre-read
// ("" when the field or the key is missing).
func (c *Client) schedHGet(ctx context.Context, key, field string) (string, error) {
	v, err := c.c.Do(ctx, c.c.B().Hget().Key(key).Field(field).Build()).ToString()
	if err != nil {
		if vk.IsValkeyNil(err) {
			return "", nil
		}
		return "", fmt.Errorf("valkey: HGET %s %s: %w", key, field, err)
	}
	return v, nil
}

// ChangePriorityResult is the reply of ff_change_priority.
type ChangePriorityResult struct {
	// Old is the stored priority before the change, New the clamped
	// priority written (0..9000).
	Old, New int64
}

// ChangePriority sets a runnable, eligible execution's priority (clamped to
// 0..9000) and re-scores it in lane:eligible from its original created_at.
// It pre-reads exec_core.lane_id to build KEYS[2].
//
//	KEYS[1] exec_core  KEYS[2] lane_eligible(lane_id)
//	ARGV[1] execution_id  ARGV[2] new_priority
//
// Reply: ok("<old>", "<new>").
func (c *Client) ChangePriority(ctx context.Context, eid model.ExecutionID, priority int) (*ChangePriorityResult, error) {
	const fn = "ff_change_priority"
	k := model.KeysFor(eid)
	lane, err := c.schedHGet(ctx, k.Core(), "lane_id")
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	keys := []string{k.Core(), model.KeysOn(k.Partition()).LaneEligible(lane)}
	rep, err := c.FCall(ctx, fn, keys, []string{string(eid), strconv.Itoa(priority)})
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	oldP, err1 := rep.Int(0)
	newP, err2 := rep.Int(1)
	if err1 != nil || err2 != nil {
		return nil, schedWrap(fn, fmt.Errorf("%w: %v", ErrMalformedReply, rep.Fields))
	}
	return &ChangePriorityResult{Old: oldP, New: newP}, nil
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
}

// RegisterWorker registers (or refreshes) a worker instance: alive key
// SET "1" PX ttl, caps hash with the same TTL, instance id added to the
// namespace's workers set. It returns WorkerRegistered when the alive key
// did not exist, else WorkerRefreshed. The keys have no hash tag, so on a
// cluster the writes go as single-key commands (registry_cluster.go).
//
//	KEYS[1] ff:worker:<ns>:<wiid>:alive  KEYS[2] ff:worker:<ns>:<wiid>:caps
//	KEYS[3] ff:idx:<ns>:workers
//	ARGV[1] instance_id  ARGV[2] worker_id  ARGV[3] lanes_csv (sorted)
//	ARGV[4] caps_csv (sorted)  ARGV[5] ttl_ms  ARGV[6] now_ms
//
// Reply: ok("registered" | "refreshed").
func (c *Client) RegisterWorker(ctx context.Context, p *RegisterWorkerParams) (string, error) {
	const fn = "ff_register_worker"
	if c.cluster {
		return c.registerWorkerSplit(ctx, p)
	}
	keys := []string{
		model.WorkerAliveKey(p.Namespace, p.InstanceID), model.WorkerCapsKey(p.Namespace, p.InstanceID),
		model.WorkersIndexKey(p.Namespace),
	}
	args := []string{
		p.InstanceID, p.WorkerID, CapabilityCSV(p.Lanes), CapabilityCSV(p.Capabilities),
		schedMS(p.TTLMs), schedMS(p.NowMs),
	}
	rep, err := c.FCall(ctx, fn, keys, args)
	if err != nil {
		return "", schedWrap(fn, err)
	}
	return rep.Field(0), nil
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

// HeartbeatWorker refreshes a registered worker's alive key and caps hash
// with the TTL stored at registration and stamps last_heartbeat_ms.
//
//	KEYS[1] ff:worker:<ns>:<wiid>:alive  KEYS[2] ff:worker:<ns>:<wiid>:caps
//	ARGV[1] now_ms
//
// Reply: ok("refreshed", "<ttl_ms>") or ok("not_registered").
func (c *Client) HeartbeatWorker(ctx context.Context, ns, instanceID string, nowMs int64) (*HeartbeatResult, error) {
	const fn = "ff_heartbeat_worker"
	if c.cluster {
		return c.heartbeatWorkerSplit(ctx, ns, instanceID, nowMs)
	}
	keys := []string{model.WorkerAliveKey(ns, instanceID), model.WorkerCapsKey(ns, instanceID)}
	rep, err := c.FCall(ctx, fn, keys, []string{schedMS(nowMs)})
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	if rep.Field(0) != WorkerRefreshed {
		return &HeartbeatResult{}, nil
	}
	ttl, err := rep.Int(1)
	if err != nil {
		return nil, schedWrap(fn, err)
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

// UpdateProgress records progress under a lite lease check (lease id and
// epoch; an expired lease is reported, not marked).
//
//	KEYS[1] exec_core
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch
//	ARGV[4] progress_pct  ARGV[5] progress_message
//
// Reply: ok().
func (c *Client) UpdateProgress(ctx context.Context, p *UpdateProgressParams) error {
	const fn = "ff_update_progress"
	args := []string{string(p.ExecutionID), p.LeaseID, strconv.FormatUint(p.LeaseEpoch, 10), p.Pct, p.Message}
	_, err := c.FCall(ctx, fn, []string{model.KeysFor(p.ExecutionID).Core()}, args)
	return schedWrap(fn, err)
}

// IssueReclaimGrant writes a claim grant for an execution whose lease
// expired or was revoked, for a later ff_reclaim_execution. Capabilities
// are matched as in IssueClaimGrant. It returns the server's
// grant_expires_at.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] lease_expiry
//	ARGV: as IssueClaimGrant.
//
// Reply: ok(execution_id, "<grant_expires_at>").
func (c *Client) IssueReclaimGrant(ctx context.Context, p *IssueClaimGrantParams) (int64, error) {
	const fn = "ff_issue_reclaim_grant"
	k := model.KeysFor(p.ExecutionID)
	keys := []string{k.Core(), k.ClaimGrant(), model.KeysOn(k.Partition()).LeaseExpiry()}
	args := []string{
		string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, p.Lane, p.CapabilityHash,
		schedMS(p.GrantTTLMs), p.RouteSnapshotJSON, p.AdmissionSummary, CapabilityCSV(p.WorkerCapabilities),
	}
	rep, err := c.FCall(ctx, fn, keys, args)
	if err != nil {
		return 0, schedWrap(fn, err)
	}
	exp, err := rep.Int(1)
	if err != nil {
		return 0, schedWrap(fn, err)
	}
	return exp, nil
}

// IssueGrantAndClaimParams are the inputs of ff_issue_grant_and_claim.
type IssueGrantAndClaimParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	// Lane selects lane:eligible / lane:active and is stored as
	// current_lane. Empty means the execution's lane_id (pre-read).
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

// GrantAndClaimResult is the reply of ff_issue_grant_and_claim.
type GrantAndClaimResult struct {
	LeaseID      string
	LeaseEpoch   uint64
	AttemptIndex int
}

// IssueGrantAndClaim is the operator's atomic grant + claim (no capability
// check). An attempt_interrupted execution resumes its current attempt;
// otherwise a new attempt is created as ff_claim_execution would.
//
//	KEYS[1] exec_core  KEYS[2] claim_grant  KEYS[3] lane_eligible(lane)
//	KEYS[4] lease_expiry  KEYS[5] worker_leases(wiid)  KEYS[6] attempts
//	KEYS[7] lease_current  KEYS[8] lease_history  KEYS[9] lane_active(lane)
//	KEYS[10] attempt_timeout  KEYS[11] execution_deadline
//	ARGV[1] execution_id  ARGV[2] worker_id  ARGV[3] worker_instance_id
//	ARGV[4] lane  ARGV[5] capability_hash  ARGV[6] lease_id
//	ARGV[7] lease_ttl_ms  ARGV[8] attempt_id  ARGV[9] attempt_policy_json
//	ARGV[10] attempt_timeout_ms  ARGV[11] execution_deadline_at
//
// Reply: ok(lease_id, "<epoch>", "<attempt_index>").
func (c *Client) IssueGrantAndClaim(ctx context.Context, p *IssueGrantAndClaimParams) (*GrantAndClaimResult, error) {
	const fn = "ff_issue_grant_and_claim"
	k := model.KeysFor(p.ExecutionID)
	idx := model.KeysOn(k.Partition())
	lane := p.Lane
	if lane == "" {
		var err error
		if lane, err = c.schedHGet(ctx, k.Core(), "lane_id"); err != nil {
			return nil, schedWrap(fn, err)
		}
	}
	keys := []string{
		k.Core(), k.ClaimGrant(), idx.LaneEligible(lane), idx.LeaseExpiry(), idx.WorkerLeases(p.WorkerInstanceID),
		k.Attempts(), k.LeaseCurrent(), k.LeaseHistory(), idx.LaneActive(lane), idx.AttemptTimeout(),
		idx.ExecutionDeadline(),
	}
	args := []string{
		string(p.ExecutionID), p.WorkerID, p.WorkerInstanceID, lane, p.CapabilityHash, p.LeaseID,
		schedMS(p.LeaseTTLMs), p.AttemptID, p.AttemptPolicyJSON, schedOptMS(p.AttemptTimeoutMs),
		schedOptMS(p.ExecutionDeadlineAt),
	}
	rep, err := c.FCall(ctx, fn, keys, args)
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	epoch, err1 := strconv.ParseUint(rep.Field(1), 10, 64)
	ai, err2 := strconv.Atoi(rep.Field(2))
	if err1 != nil || err2 != nil {
		return nil, schedWrap(fn, fmt.Errorf("%w: %v", ErrMalformedReply, rep.Fields))
	}
	return &GrantAndClaimResult{LeaseID: rep.Field(0), LeaseEpoch: epoch, AttemptIndex: ai}, nil
}
