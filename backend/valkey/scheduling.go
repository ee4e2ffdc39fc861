package valkey

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/model"
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
type PromoteStatus string

// ff_promote_delayed outcomes.
const (
	PromotePromoted           PromoteStatus = "promoted"
	PromoteNotYetDue          PromoteStatus = "not_yet_due"
	PromoteNotFoundCleaned    PromoteStatus = "not_found_cleaned"
	PromoteNotRunnableCleaned PromoteStatus = "not_runnable_cleaned"
	PromoteNotDelayedCleaned  PromoteStatus = "not_delayed_cleaned"
)

// PromoteDelayedParams are the inputs of ff_promote_delayed.
type PromoteDelayedParams struct {
	// ExecutionID is the member read from lane:delayed. It need not parse:
	// garbage members are cleaned up (not_found_cleaned).
	ExecutionID model.ExecutionID
	// Partition is the partition whose lane index is scanned. When nil the
	// partition embedded in ExecutionID is used.
	Partition *model.Partition
	Lane      string
	// NowMs is the scanner's clock (server time).
	NowMs int64
}

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
	const fn = "ff_promote_delayed"
	part := p.ExecutionID.Partition()
	if p.Partition != nil {
		part = *p.Partition
	}
	idx := model.KeysOn(part)
	core := "ff:exec:" + idx.Tag() + ":" + string(p.ExecutionID) + ":core"
	keys := []string{core, idx.LaneDelayed(p.Lane), idx.LaneEligible(p.Lane)}
	rep, err := c.FCall(ctx, fn, keys, []string{string(p.ExecutionID), schedMS(p.NowMs)})
	if err != nil {
		return "", schedWrap(fn, err)
	}
	return PromoteStatus(rep.Field(0)), nil
}
