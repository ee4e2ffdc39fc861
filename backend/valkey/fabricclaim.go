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
