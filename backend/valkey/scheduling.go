package valkey

import (
	"context"
	"fmt"
	"strconv"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// schedMS renders a millisecond count as ARGV text.
func schedMS(v int64) string { return strconv.FormatInt(v, 10) }

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
type IssueClaimGrantParams = fcall.IssueClaimGrantParams

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
	call := p.Call()
	_, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	return schedWrap(call.Function, err)
}

// CapabilityCSV renders capabilities as FlowFabric's sorted, de-duplicated
// CSV (empty tokens dropped).
func CapabilityCSV(caps []string) string { return fcall.CapabilityCSV(caps) }

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
type ChangePriorityResult = fcall.ChangePriorityResult

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
	call := (&fcall.ChangePriorityParams{ExecutionID: eid, Lane: lane, Priority: priority}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	res, ok := fcall.DecodeChangePriority(rep)
	if !ok {
		return nil, schedWrap(fn, fmt.Errorf("%w: %v", ErrMalformedReply, rep.Fields))
	}
	return res, nil
}

// Worker registry statuses.
const (
	WorkerRegistered    = fcall.WorkerRegistered
	WorkerRefreshed     = fcall.WorkerRefreshed
	WorkerNotRegistered = fcall.WorkerNotRegistered
)

// RegisterWorkerParams are the inputs of ff_register_worker.
type RegisterWorkerParams = fcall.RegisterWorkerParams

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
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", schedWrap(fn, err)
	}
	return rep.Field(0), nil
}

// HeartbeatResult is the reply of ff_heartbeat_worker.
type HeartbeatResult = fcall.HeartbeatResult

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
	call := (&fcall.HeartbeatWorkerParams{Namespace: ns, InstanceID: instanceID, NowMs: nowMs}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	res, err := fcall.DecodeHeartbeat(rep, nowMs)
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	return res, nil
}

// UpdateProgressParams are the inputs of ff_update_progress.
type UpdateProgressParams = fcall.UpdateProgressParams

// UpdateProgress records progress under a lite lease check (lease id and
// epoch; an expired lease is reported, not marked).
//
//	KEYS[1] exec_core
//	ARGV[1] execution_id  ARGV[2] lease_id  ARGV[3] lease_epoch
//	ARGV[4] progress_pct  ARGV[5] progress_message
//
// Reply: ok().
func (c *Client) UpdateProgress(ctx context.Context, p *UpdateProgressParams) error {
	call := p.Call()
	_, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	return schedWrap(call.Function, err)
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
	call := p.ReclaimCall()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, schedWrap(call.Function, err)
	}
	exp, err := fcall.DecodeReclaimGrant(rep)
	if err != nil {
		return 0, schedWrap(call.Function, err)
	}
	return exp, nil
}

// IssueGrantAndClaimParams are the inputs of ff_issue_grant_and_claim.
type IssueGrantAndClaimParams = fcall.IssueGrantAndClaimParams

// GrantAndClaimResult is the reply of ff_issue_grant_and_claim.
type GrantAndClaimResult = fcall.GrantAndClaimResult

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
	q := *p
	if q.Lane == "" {
		var err error
		if q.Lane, err = c.schedHGet(ctx, model.KeysFor(p.ExecutionID).Core(), "lane_id"); err != nil {
			return nil, schedWrap(fn, err)
		}
	}
	call := q.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	res, ok := fcall.DecodeGrantAndClaim(rep)
	if !ok {
		return nil, schedWrap(fn, fmt.Errorf("%w: %v", ErrMalformedReply, rep.Fields))
	}
	return res, nil
}
