package fcall

import "github.com/fabric-host/fabric/model"

// NilSentinel stands for a missing flow id or downstream in the flow keys
// of an ff_resolve_dependency whose child has no flow_id.
const NilSentinel = "_nil_"

// ResolveDependencyParams are the inputs of ff_resolve_dependency.
type ResolveDependencyParams struct {
	// Downstream is the child; Upstream the completed execution.
	Downstream, Upstream model.ExecutionID
	// EdgeID is the edge id as read from the adjacency / unresolved set.
	EdgeID string
	// UpstreamOutcome is the upstream's terminal_outcome.
	UpstreamOutcome string
	// Lane and AttemptIndex are the child's lane_id and
	// current_attempt_index, pre-read by the caller.
	Lane         string
	AttemptIndex int
	// Flow holds the flow keys (KEYS 12-14) and its ID is ARGV 4; an empty
	// ID builds the flow keys with NilSentinel.
	Flow  Flow
	NowMs int64
	// Legacy sends the 11-KEYS / 3-ARGV form (all_of only, no sibling
	// cancel bookkeeping).
	Legacy bool
}

// Call builds ff_resolve_dependency: 14 KEYS / 5 ARGV (11 / 3 Legacy).
//
//	KEYS[1] exec_core  KEYS[2] deps_meta  KEYS[3] deps_unresolved  KEYS[4] dep:<edge>
//	KEYS[5] lane eligible  KEYS[6] lane terminal  KEYS[7] lane blocked:dependencies
//	KEYS[8] attempt(idx)  KEYS[9] stream meta(idx)  KEYS[10] child payload
//	KEYS[11] upstream result (on the child's tag)  KEYS[12] edgegroup:<child>
//	KEYS[13] in:<child>  KEYS[14] ff:idx:{fp:N}:pending_cancel_groups
//	ARGV[1] edge_id  ARGV[2] upstream outcome  ARGV[3] now_ms  ARGV[4] flow_id
//	ARGV[5] downstream eid
func (p *ResolveDependencyParams) Call() Call {
	part := p.Downstream.Partition()
	ek := model.KeysFor(p.Downstream)
	pk := model.KeysOn(part)
	up := model.KeysForOn(part, p.Upstream)
	i := p.AttemptIndex
	keys := []string{ek.Core(), ek.DepsMeta(), ek.DepsUnresolved(), ek.DepEdge(p.EdgeID),
		pk.LaneEligible(p.Lane), pk.LaneTerminal(p.Lane), pk.LaneBlockedDependencies(p.Lane),
		ek.Attempt(i), ek.StreamMeta(i), ek.Payload(), up.Result()}
	args := []string{p.EdgeID, p.UpstreamOutcome, itoa(p.NowMs)}
	if !p.Legacy {
		fid, child := p.Flow.ID, p.Downstream
		if fid == "" {
			fid, child = NilSentinel, NilSentinel
		}
		fk := model.FlowKeysOn(p.Flow.Partition, fid)
		keys = append(keys, fk.EdgeGroup(child), fk.Incoming(child),
			model.KeysOn(p.Flow.Partition).PendingCancelGroups())
		args = append(args, p.Flow.ID, string(p.Downstream))
	}
	return Call{Function: "ff_resolve_dependency", Keys: keys, Args: args}
}

// ResolveResult is ff_resolve_dependency's reply: Resolution is
// already_resolved, satisfied, impossible, pending or already_fired;
// Effect is "", data_injected or child_skipped.
type ResolveResult struct {
	Resolution string
	Effect     string
}

// ChildSkipped reports the skip the router cascades to grandchildren.
func (r *ResolveResult) ChildSkipped() bool { return r.Effect == "child_skipped" }

// DecodeResolveDependency reads ff_resolve_dependency's reply.
func DecodeResolveDependency(r *Reply) *ResolveResult {
	return &ResolveResult{Resolution: r.Field(0), Effect: r.Field(1)}
}

// SiblingCancelGroup names one pending sibling-cancel group (a member
// "<flow_id>|<downstream_eid>" of pending_cancel_groups): the inputs of
// ff_drain_sibling_cancel_group and ff_reconcile_sibling_cancel_group.
type SiblingCancelGroup struct {
	Flow       Flow
	Downstream model.ExecutionID
}

// keys are both functions' KEYS:
//
//	KEYS[1] ff:idx:{fp:N}:pending_cancel_groups  KEYS[2] edgegroup:<downstream>
//	ARGV[1] flow_id  ARGV[2] downstream eid
func (g *SiblingCancelGroup) call(fn string) Call {
	return Call{Function: fn,
		Keys: []string{model.KeysOn(g.Flow.Partition).PendingCancelGroups(), g.Flow.keys().EdgeGroup(g.Downstream)},
		Args: []string{g.Flow.ID, string(g.Downstream)}}
}

// Drain builds ff_drain_sibling_cancel_group, sent after every listed
// sibling was cancelled. Its reply's field 0 is drained,
// drained_sans_group or already_drained.
func (g *SiblingCancelGroup) Drain() Call { return g.call("ff_drain_sibling_cancel_group") }

// Reconcile builds ff_reconcile_sibling_cancel_group. Its reply's fields
// are the disposition (no_op, sremmed_stale, completed_drain) and its
// detail.
func (g *SiblingCancelGroup) Reconcile() Call { return g.call("ff_reconcile_sibling_cancel_group") }

// AckCancelMemberParams are the inputs of ff_ack_cancel_member.
type AckCancelMemberParams struct {
	Flow Flow
	// Member is the execution that no longer owes a cancel.
	Member string
}

// Call builds ff_ack_cancel_member.
//
//	KEYS[1] pending_cancels  KEYS[2] cancel_backlog
//	ARGV[1] execution_id  ARGV[2] flow_id
func (p *AckCancelMemberParams) Call() Call {
	return Call{Function: "ff_ack_cancel_member",
		Keys: []string{p.Flow.keys().PendingCancels(), model.KeysOn(p.Flow.Partition).CancelBacklog()},
		Args: []string{p.Member, p.Flow.ID}}
}
