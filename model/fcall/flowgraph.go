package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// Flow names a flow: its partition and its id as stored.
type Flow struct {
	Partition model.Partition
	ID        string
}

func (f Flow) keys() model.FlowKeys { return model.FlowKeysOn(f.Partition, f.ID) }

// CreateFlowParams are the inputs of ff_create_flow.
type CreateFlowParams struct {
	Flow            Flow
	Kind, Namespace string
	// NowMs is sent but ignored: timestamps come from the server clock.
	NowMs int64
}

// Call builds ff_create_flow; a flow that existed replies
// StatusAlreadySatisfied.
//
//	KEYS[1] flow_core  KEYS[2] members  KEYS[3] ff:idx:{fp:N}:flow_index
//	ARGV[1] flow_id  ARGV[2] flow_kind  ARGV[3] namespace  ARGV[4] now_ms (ignored)
func (p *CreateFlowParams) Call() Call {
	fk := p.Flow.keys()
	return Call{Function: "ff_create_flow",
		Keys: []string{fk.Core(), fk.Members(), model.KeysOn(p.Flow.Partition).FlowIndex()},
		Args: []string{p.Flow.ID, p.Kind, p.Namespace, itoa(p.NowMs)}}
}

// AddExecutionToFlowParams are the inputs of ff_add_execution_to_flow.
type AddExecutionToFlowParams struct {
	Flow Flow
	// ExecutionID must live on the flow's partition.
	ExecutionID model.ExecutionID
	NowMs       int64
}

// Call builds ff_add_execution_to_flow.
//
//	KEYS[1] flow_core  KEYS[2] members  KEYS[3] flow_index  KEYS[4] exec_core
//	ARGV[1] flow_id  ARGV[2] execution_id  ARGV[3] now_ms (ignored)
func (p *AddExecutionToFlowParams) Call() Call {
	fk := p.Flow.keys()
	return Call{Function: "ff_add_execution_to_flow",
		Keys: []string{fk.Core(), fk.Members(), model.KeysOn(p.Flow.Partition).FlowIndex(), model.KeysFor(p.ExecutionID).Core()},
		Args: []string{p.Flow.ID, string(p.ExecutionID), itoa(p.NowMs)}}
}

// DecodeAddExecutionToFlow reads ff_add_execution_to_flow's reply: the
// flow's node count, and whether the execution was already a member.
func DecodeAddExecutionToFlow(r *Reply) (nodes int64, existed bool, err error) {
	n, err := r.Int(1)
	return n, r.Status == StatusAlreadySatisfied, err
}

// CancelFlowParams are the inputs of ff_cancel_flow.
type CancelFlowParams struct {
	Flow           Flow
	Reason, Policy string
	// GraceMs < 0 sends "" (the 30 s default).
	GraceMs int64
	NowMs   int64
}

// Call builds ff_cancel_flow.
//
//	KEYS[1] flow_core  KEYS[2] members  KEYS[3] flow_index (unused)  KEYS[4] pending_cancels
//	KEYS[5] ff:idx:{fp:N}:cancel_backlog
//	ARGV[1] flow_id  ARGV[2] reason  ARGV[3] cancellation_policy  ARGV[4] now_ms (ignored)
//	ARGV[5] grace_ms
func (p *CancelFlowParams) Call() Call {
	fk := p.Flow.keys()
	pk := model.KeysOn(p.Flow.Partition)
	grace := ""
	if p.GraceMs >= 0 {
		grace = itoa(p.GraceMs)
	}
	return Call{Function: "ff_cancel_flow",
		Keys: []string{fk.Core(), fk.Members(), pk.FlowIndex(), fk.PendingCancels(), pk.CancelBacklog()},
		Args: []string{p.Flow.ID, p.Reason, p.Policy, itoa(p.NowMs), grace}}
}

// CancelFlowResult is ff_cancel_flow's reply.
type CancelFlowResult struct {
	Policy  string
	Members []model.ExecutionID
}

// DecodeCancelFlow reads ff_cancel_flow's reply: the policy, then the
// members to cancel.
func DecodeCancelFlow(r *Reply) *CancelFlowResult {
	res := &CancelFlowResult{Policy: r.Field(0)}
	if len(r.Fields) > 1 {
		for _, m := range r.Fields[1:] {
			res.Members = append(res.Members, model.ExecutionID(m))
		}
	}
	return res
}

// DependencyEdge is one dependency edge of a flow, the input of
// ff_stage_dependency_edge and ff_apply_dependency_to_child.
type DependencyEdge struct {
	Flow                 Flow
	EdgeID               string
	Upstream, Downstream model.ExecutionID
	// Kind is sent as given (the driver defaults it).
	Kind string
	// DataPassingRef, when set, copies the upstream's result over the
	// downstream's payload on satisfaction.
	DataPassingRef string
	// GraphRevision is the expected flow revision (stage) or the revision
	// the edge was staged at (apply).
	GraphRevision int64
	NowMs         int64
}

// StageCall builds ff_stage_dependency_edge.
//
//	KEYS[1] flow_core  KEYS[2] members  KEYS[3] edge  KEYS[4] out:<upstream>
//	KEYS[5] in:<downstream>  KEYS[6] grant:<edge> (unused)
//	ARGV[1] flow_id  ARGV[2] edge_id  ARGV[3] upstream  ARGV[4] downstream  ARGV[5] kind
//	ARGV[6] data_passing_ref  ARGV[7] expected_graph_revision  ARGV[8] now_ms
func (e *DependencyEdge) StageCall() Call {
	fk := e.Flow.keys()
	return Call{Function: "ff_stage_dependency_edge",
		Keys: []string{fk.Core(), fk.Members(), fk.Edge(e.EdgeID), fk.Outgoing(e.Upstream), fk.Incoming(e.Downstream),
			fk.Grant(e.EdgeID)},
		Args: []string{e.Flow.ID, e.EdgeID, string(e.Upstream), string(e.Downstream), e.Kind, e.DataPassingRef,
			itoa(e.GraphRevision), itoa(e.NowMs)}}
}

// DecodeStageEdge reads ff_stage_dependency_edge's reply: the new graph
// revision.
func DecodeStageEdge(r *Reply) (int64, error) { return r.Int(1) }

// ApplyCall builds ff_apply_dependency_to_child; lane is the child's
// lane_id.
//
//	KEYS[1] exec_core  KEYS[2] deps_meta  KEYS[3] deps_unresolved  KEYS[4] dep:<edge>
//	KEYS[5] lane eligible  KEYS[6] lane blocked:dependencies  KEYS[7] deps_all_edges
//	KEYS[8] edgegroup:<child>
//	ARGV[1] flow_id  ARGV[2] edge_id  ARGV[3] upstream  ARGV[4] graph_revision  ARGV[5] kind
//	ARGV[6] data_passing_ref  ARGV[7] now_ms
func (e *DependencyEdge) ApplyCall(lane string) Call {
	ek := model.KeysFor(e.Downstream)
	pk := model.KeysOn(e.Downstream.Partition())
	return Call{Function: "ff_apply_dependency_to_child",
		Keys: []string{ek.Core(), ek.DepsMeta(), ek.DepsUnresolved(), ek.DepEdge(e.EdgeID), pk.LaneEligible(lane),
			pk.LaneBlockedDependencies(lane), ek.DepsAllEdges(), e.Flow.keys().EdgeGroup(e.Downstream)},
		Args: []string{e.Flow.ID, e.EdgeID, string(e.Upstream), itoa(e.GraphRevision), e.Kind, e.DataPassingRef,
			itoa(e.NowMs)}}
}

// DecodeApplyDependency reads ff_apply_dependency_to_child's reply: the
// child's unsatisfied count, or alreadyApplied on a repeat.
func DecodeApplyDependency(r *Reply) (unsatisfied int64, alreadyApplied bool, err error) {
	if r.Field(0) == "already_applied" {
		return 0, true, nil
	}
	n, err := r.Int(0)
	return n, false, err
}

// SetEdgeGroupPolicyParams are the inputs of ff_set_edge_group_policy.
type SetEdgeGroupPolicyParams struct {
	Flow                 Flow
	Downstream           model.ExecutionID
	Variant, OnSatisfied string
	K                    int
	NowMs                int64
}

// Call builds ff_set_edge_group_policy; its reply's field 0 is "set" or
// "already_set".
//
//	KEYS[1] flow_core  KEYS[2] edgegroup:<downstream>
//	ARGV[1] policy_variant  ARGV[2] on_satisfied  ARGV[3] k  ARGV[4] now_ms
func (p *SetEdgeGroupPolicyParams) Call() Call {
	fk := p.Flow.keys()
	return Call{Function: "ff_set_edge_group_policy",
		Keys: []string{fk.Core(), fk.EdgeGroup(p.Downstream)},
		Args: []string{p.Variant, p.OnSatisfied, strconv.Itoa(p.K), itoa(p.NowMs)}}
}

// EvaluateFlowEligibilityCall builds the read-only
// ff_evaluate_flow_eligibility; its reply's field 0 is not_found,
// not_runnable, owned, terminal, eligible, impossible or
// blocked_by_dependencies.
//
//	KEYS[1] exec_core  KEYS[2] deps_meta
func EvaluateFlowEligibilityCall(eid model.ExecutionID) Call {
	ek := model.KeysFor(eid)
	return Call{Function: "ff_evaluate_flow_eligibility", Keys: []string{ek.Core(), ek.DepsMeta()}}
}

// PromoteBlockedToEligibleParams are the inputs of
// ff_promote_blocked_to_eligible.
type PromoteBlockedToEligibleParams struct {
	ExecutionID model.ExecutionID
	// Lane is exec_core's lane_id, pre-read.
	Lane  string
	NowMs int64
}

// Call builds ff_promote_blocked_to_eligible.
//
//	KEYS[1] exec_core  KEYS[2] lane blocked:dependencies  KEYS[3] lane eligible
//	KEYS[4] deps_meta  KEYS[5] deps_unresolved
//	ARGV[1] execution_id  ARGV[2] now_ms
func (p *PromoteBlockedToEligibleParams) Call() Call {
	ek := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(p.ExecutionID.Partition())
	return Call{Function: "ff_promote_blocked_to_eligible",
		Keys: []string{ek.Core(), pk.LaneBlockedDependencies(p.Lane), pk.LaneEligible(p.Lane), ek.DepsMeta(),
			ek.DepsUnresolved()},
		Args: []string{string(p.ExecutionID), itoa(p.NowMs)}}
}

// ReplayExecutionParams are the inputs of ff_replay_execution.
type ReplayExecutionParams struct {
	ExecutionID model.ExecutionID
	// Lane is exec_core's lane_id, pre-read.
	Lane  string
	NowMs int64
	// SkippedFlowMember adds the dependency keys of a replayed skipped
	// flow member, one dep key per inbound edge in Edges.
	SkippedFlowMember bool
	Edges             []string
}

// Call builds ff_replay_execution.
//
//	KEYS[1] exec_core  KEYS[2] lane terminal  KEYS[3] lane eligible  KEYS[4] lease_history
//	[KEYS[5] lane blocked:dependencies  KEYS[6] deps_meta  KEYS[7] deps_unresolved
//	 KEYS[8..] dep:<edge> per edge]
//	ARGV[1] execution_id  ARGV[2] now_ms (ignored)  [ARGV[3..] edge ids]
func (p *ReplayExecutionParams) Call() Call {
	ek := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(p.ExecutionID.Partition())
	keys := []string{ek.Core(), pk.LaneTerminal(p.Lane), pk.LaneEligible(p.Lane), ek.LeaseHistory()}
	args := []string{string(p.ExecutionID), itoa(p.NowMs)}
	if p.SkippedFlowMember {
		keys = append(keys, pk.LaneBlockedDependencies(p.Lane), ek.DepsMeta(), ek.DepsUnresolved())
		for _, e := range p.Edges {
			keys = append(keys, ek.DepEdge(e))
			args = append(args, e)
		}
	}
	return Call{Function: "ff_replay_execution", Keys: keys, Args: args}
}

// SetFlowTagsCall builds ff_set_flow_tags with key/value pairs (keys must
// look like "<caller>.<field>"); DecodeSetTags reads its reply.
//
//	KEYS[1] flow_core  KEYS[2] flow tags
//	ARGV k1, v1, k2, v2, ...
func SetFlowTagsCall(flow Flow, pairs []string) Call {
	fk := flow.keys()
	return Call{Function: "ff_set_flow_tags", Keys: []string{fk.Core(), fk.Tags()}, Args: pairs}
}
