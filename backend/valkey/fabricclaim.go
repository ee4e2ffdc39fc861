package valkey

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// FabricClaimFunction is fabric's Valkey Function that issues a claim
// grant and claims with it in one call (lua/fabric/claim.lua).
const FabricClaimFunction = "fabric_claim_execution"

// FabricClaimParams are the inputs of fabric_claim_execution: the claim's
// (ff_claim_execution) and the grant's own (ff_issue_claim_grant; its
// execution, worker, lane and capability hash are the claim's).
type FabricClaimParams struct {
	Claim ClaimExecutionParams
	// GrantTTLMs is the grant lifetime ff_issue_claim_grant would be given.
	GrantTTLMs        int64
	RouteSnapshotJSON string
	AdmissionSummary  string
	// WorkerCapabilities are matched against the execution's required
	// capabilities, as ff_issue_claim_grant matches them.
	WorkerCapabilities []string
	// WorkerCapabilitiesCSV, when set, is sent instead of
	// CapabilityCSV(WorkerCapabilities) (a caller that claims often renders
	// it once).
	WorkerCapabilitiesCSV string
	// AttemptTimeoutFromPolicy takes the attempt timeout from the stored
	// policy's timeout_policy.attempt_timeout_ms when Claim.AttemptTimeoutMs
	// is 0, on the server, so that the caller need not read the policy
	// first.
	AttemptTimeoutFromPolicy bool
}

// Call builds the FCALL of fabric_claim_execution. It fills in minted ids
// (Claim.LeaseID, Claim.AttemptID).
//
//	KEYS[1..14] as ff_claim_execution (ClaimExecutionParams.Call)
//	KEYS[15] exec policy  KEYS[16] exec payload (read only)
//	ARGV[1..12] as ff_claim_execution  ARGV[13] grant_ttl_ms
//	ARGV[14] route_snapshot_json  ARGV[15] admission_summary
//	ARGV[16] worker_capabilities_csv (sorted)
//	ARGV[17] "1" = attempt timeout from the stored policy, else ""
func (p *FabricClaimParams) Call() Call {
	c := p.Claim.Call()
	k := model.KeysFor(p.Claim.ExecutionID)
	csv := p.WorkerCapabilitiesCSV
	if csv == "" {
		csv = CapabilityCSV(p.WorkerCapabilities)
	}
	fromPolicy := ""
	if p.AttemptTimeoutFromPolicy {
		fromPolicy = "1"
	}
	c.Function = FabricClaimFunction
	c.Keys = append(c.Keys, k.Policy(), k.Payload())
	c.Args = append(c.Args, schedMS(p.GrantTTLMs), p.RouteSnapshotJSON, p.AdmissionSummary, csv, fromPolicy)
	return c
}

// FabricClaimResult is a successful fabric_claim_execution: the lease, and
// what a worker needs to run the execution.
type FabricClaimResult struct {
	ClaimResult
	Kind, Namespace, FlowID, Lane string
	Payload                       []byte
}

// ParseFabricClaim decodes the success reply of fabric_claim_execution:
// ff_claim_execution's six fields, then execution_kind, namespace,
// flow_id, lane_id and the payload.
func ParseFabricClaim(rep *Reply) (*FabricClaimResult, error) {
	cr, err := parseClaim(rep)
	if err != nil {
		return nil, fmt.Errorf("%s reply: %w", FabricClaimFunction, err)
	}
	return &FabricClaimResult{ClaimResult: *cr, Kind: rep.Field(6), Namespace: rep.Field(7),
		FlowID: rep.Field(8), Lane: rep.Field(9), Payload: []byte(rep.Field(10))}, nil
}

// ClaimWithGrant issues a claim grant and claims with it in one call
// (fabric_claim_execution): the keyspace afterwards is what
// ff_issue_claim_grant followed by ff_claim_execution leave. A refusal is
// the *LuaError of the call that refused; after a claim refusal the grant
// stays, as after the two calls (use_claim_resumed_execution: claim with
// ff_claim_resumed_execution and the same grant).
func (c *Client) ClaimWithGrant(ctx context.Context, p *FabricClaimParams) (*FabricClaimResult, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, schedWrap(FabricClaimFunction, err)
	}
	return ParseFabricClaim(rep)
}

// CallFor builds the FCALL of ff_complete_execution for the holder of the
// lease, who knows the execution's lane, the attempt index and its own
// worker instance id, instead of pre-reading them from exec_core as
// CompleteExecution does (a round trip saved; the call can be pipelined).
// Keys built from stale knowledge are harmless: the lease fence is checked
// before anything is written.
func (p *CompleteExecutionParams) CallFor(lane string, attemptIndex int, workerInstanceID string) Call {
	return p.call(execRefs{lane: lane, attemptIndex: strconv.Itoa(attemptIndex), workerInstanceID: workerInstanceID})
}

// FabricClaimNextFunction is fabric's Valkey Function that claims the
// next eligible executions of a lane on one partition
// (lua/fabric/claim.lua): it picks the heads itself, so workers of one
// lane never race for the same one.
const FabricClaimNextFunction = "fabric_claim_next"

// FabricClaimNextParams are the inputs of fabric_claim_next. Each claim
// it makes is fabric_claim_execution's for the head's id, with the
// attempt policy "{}", no execution deadline, empty route snapshot and
// admission summary, and the attempt timeout from the stored policy.
type FabricClaimNextParams struct {
	// Partition and Lane name the eligible zset the heads are read from.
	Partition model.Partition
	Lane      string
	// WorkerID and WorkerInstanceID are the claimer's; CapabilityHash is
	// stored on a grant left by a refused claim.
	WorkerID, WorkerInstanceID, CapabilityHash string
	// LeaseTTLMs is the lease lifetime; RenewBeforeMs the renewal
	// deadline offset (2/3 of LeaseTTLMs when 0); GrantTTLMs the grant's.
	LeaseTTLMs, RenewBeforeMs, GrantTTLMs int64
	// WorkerCapabilitiesCSV is CapabilityCSV of the worker's capabilities.
	WorkerCapabilitiesCSV string
	// Claims is how many executions to claim (at least 1); Heads how many
	// eligible heads the call may try (Claims when smaller).
	Claims, Heads int
	// LeaseIDs and AttemptIDs are the ids of the n-th claim; missing ones
	// are minted by Call.
	LeaseIDs, AttemptIDs []string
}

// Call builds the FCALL of fabric_claim_next, minting missing lease and
// attempt ids.
//
//	KEYS[1] lane eligible  KEYS[2] lease_expiry  KEYS[3] worker_leases
//	KEYS[4] lane active  KEYS[5] attempt_timeout  KEYS[6] execution_deadline
//	ARGV[1] worker_id  ARGV[2] worker_instance_id  ARGV[3] lane
//	ARGV[4] capability_hash  ARGV[5] lease_ttl_ms  ARGV[6] renew_before_ms
//	ARGV[7] grant_ttl_ms  ARGV[8] worker_capabilities_csv  ARGV[9] claims
//	ARGV[10] heads  ARGV[11..] (lease_id, attempt_id) per claim
func (p *FabricClaimNextParams) Call() Call {
	p.Claims = max(p.Claims, 1)
	p.Heads = max(p.Heads, p.Claims)
	for len(p.LeaseIDs) < p.Claims {
		p.LeaseIDs = append(p.LeaseIDs, model.NewUUID().String())
	}
	for len(p.AttemptIDs) < p.Claims {
		p.AttemptIDs = append(p.AttemptIDs, model.NewUUID().String())
	}
	renew := p.RenewBeforeMs
	if renew == 0 {
		renew = p.LeaseTTLMs * 2 / 3
	}
	pk := model.KeysOn(p.Partition)
	args := make([]string, 0, 10+2*p.Claims)
	args = append(args, p.WorkerID, p.WorkerInstanceID, p.Lane, p.CapabilityHash, schedMS(p.LeaseTTLMs), schedMS(renew),
		schedMS(p.GrantTTLMs), p.WorkerCapabilitiesCSV, strconv.Itoa(p.Claims), strconv.Itoa(p.Heads))
	for i := 0; i < p.Claims; i++ {
		args = append(args, p.LeaseIDs[i], p.AttemptIDs[i])
	}
	return Call{Function: FabricClaimNextFunction,
		Keys: []string{pk.LaneEligible(p.Lane), pk.LeaseExpiry(), pk.WorkerLeases(p.WorkerInstanceID),
			pk.LaneActive(p.Lane), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: args}
}

// ClaimNextItem is one head fabric_claim_next tried: a claim (Result set)
// or the refusal fabric_claim_execution would have answered for it (Err, a
// *LuaError).
type ClaimNextItem struct {
	ExecutionID model.ExecutionID
	Result      *FabricClaimResult
	Err         error
}

// claimNextStride is the fields per head in fabric_claim_next's reply:
// the id, the status, eleven fields.
const claimNextStride = 13

// ParseFabricClaimNext decodes fabric_claim_next's success reply: the
// count of heads tried, then per head its id, "OK" or the refusal code,
// and eleven fields (fabric_claim_execution's success fields, or the
// refusal's details padded with "").
func ParseFabricClaimNext(rep *Reply) ([]ClaimNextItem, error) {
	n, err := rep.Int(0)
	if err != nil || n < 0 || len(rep.Fields) != 1+int(n)*claimNextStride {
		return nil, fmt.Errorf("%w from %s: %d fields", ErrMalformedReply, FabricClaimNextFunction, len(rep.Fields))
	}
	out := make([]ClaimNextItem, n)
	for i := range out {
		rec := rep.Fields[1+i*claimNextStride : 1+(i+1)*claimNextStride]
		out[i].ExecutionID = model.ExecutionID(rec[0])
		if rec[1] != "OK" {
			details := rec[2:]
			for len(details) > 0 && details[len(details)-1] == "" {
				details = details[:len(details)-1]
			}
			out[i].Err = &LuaError{Function: FabricClaimFunction, Code: ErrorCode(rec[1]), Details: details}
			continue
		}
		fr, err := ParseFabricClaim(&Reply{Status: rec[1], Fields: rec[2:]})
		if err != nil {
			return nil, err
		}
		out[i].Result = fr
	}
	return out, nil
}

// ClaimNext claims up to p.Claims eligible executions of a lane on one
// partition with one fabric_claim_next and returns every head it tried.
func (c *Client) ClaimNext(ctx context.Context, p *FabricClaimNextParams) ([]ClaimNextItem, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, schedWrap(FabricClaimNextFunction, err)
	}
	return ParseFabricClaimNext(rep)
}
