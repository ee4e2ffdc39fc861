package valkey

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// Edge-group policy variants and on_satisfied behaviours.
const (
	EdgeGroupAllOf           = "all_of"
	EdgeGroupAnyOf           = "any_of"
	EdgeGroupQuorum          = "quorum"
	OnSatisfiedCancelRemain  = "cancel_remaining"
	OnSatisfiedLetRun        = "let_run"
	DefaultDependencyKind    = "success_only"
	DefaultCancelFlowGraceMs = 30000
)

func (c *Client) flowPartition(flow model.UUID) model.Partition { return c.parts.FlowPartition(flow) }

func (c *Client) flowKeys(flow model.UUID) model.FlowKeys {
	return model.FlowKeysFor(c.flowPartition(flow), flow)
}

// flowRef names flow for model/fcall's layouts.
func (c *Client) flowRef(flow model.UUID) fcall.Flow {
	return fcall.Flow{Partition: c.flowPartition(flow), ID: flow.String()}
}

// CreateFlow calls ff_create_flow and reports whether the flow already
// existed (ALREADY_SATISFIED). Timestamps come from the server clock.
//
//	KEYS[1] flow_core  KEYS[2] members  KEYS[3] ff:idx:{fp:N}:flow_index
//	ARGV[1] flow_id  ARGV[2] flow_kind  ARGV[3] namespace  ARGV[4] now_ms (ignored)
func (c *Client) CreateFlow(ctx context.Context, flow model.UUID, kind, namespace string, nowMs int64) (existed bool, err error) {
	call := (&fcall.CreateFlowParams{Flow: c.flowRef(flow), Kind: kind, Namespace: namespace, NowMs: nowMs}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return false, fmt.Errorf("create flow %s: %w", flow, err)
	}
	return rep.Status == fcall.StatusAlreadySatisfied, nil
}

// ErrWrongFlowPartition is returned by AddExecutionToFlow for an execution
// minted on another partition than the flow's.
var ErrWrongFlowPartition = fmt.Errorf("valkey: execution is not on its flow's partition")

// AddExecutionToFlow calls ff_add_execution_to_flow and returns the flow's
// node count and whether the execution was already a member. The
// execution must live on the flow's partition (mint it with
// PartitionConfig.NewFlowExecutionID).
//
//	KEYS[1] flow_core  KEYS[2] members  KEYS[3] flow_index  KEYS[4] exec_core
//	ARGV[1] flow_id  ARGV[2] execution_id  ARGV[3] now_ms (ignored)
func (c *Client) AddExecutionToFlow(ctx context.Context, flow model.UUID, eid model.ExecutionID, nowMs int64) (nodes int64, existed bool, err error) {
	p := c.flowPartition(flow)
	if eid.Partition() != p {
		return 0, false, fmt.Errorf("add %s to flow %s on %s: %w", eid, flow, p, ErrWrongFlowPartition)
	}
	call := (&fcall.AddExecutionToFlowParams{Flow: c.flowRef(flow), ExecutionID: eid, NowMs: nowMs}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, false, fmt.Errorf("add %s to flow %s: %w", eid, flow, err)
	}
	return fcall.DecodeAddExecutionToFlow(rep)
}

// CancelFlowResult is CancelFlow's reply.
type CancelFlowResult = fcall.CancelFlowResult

// CancelFlow calls ff_cancel_flow. Members are not touched: the caller
// cancels each one and acks it with AckCancelMember. graceMs < 0 sends ""
// (the 30 s default).
//
//	KEYS[1] flow_core  KEYS[2] members  KEYS[3] flow_index (unused)  KEYS[4] pending_cancels
//	KEYS[5] ff:idx:{fp:N}:cancel_backlog
//	ARGV[1] flow_id  ARGV[2] reason  ARGV[3] cancellation_policy  ARGV[4] now_ms (ignored)
//	ARGV[5] grace_ms
func (c *Client) CancelFlow(ctx context.Context, flow model.UUID, reason, policy string, graceMs, nowMs int64) (*CancelFlowResult, error) {
	call := (&fcall.CancelFlowParams{Flow: c.flowRef(flow), Reason: reason, Policy: policy, GraceMs: graceMs,
		NowMs: nowMs}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("cancel flow %s: %w", flow, err)
	}
	return fcall.DecodeCancelFlow(rep), nil
}

// AckCancelMember calls ff_ack_cancel_member: eid no longer owes a cancel;
// the flow leaves the cancel backlog once nobody does.
//
//	KEYS[1] pending_cancels  KEYS[2] cancel_backlog
//	ARGV[1] execution_id  ARGV[2] flow_id
func (c *Client) AckCancelMember(ctx context.Context, flow model.UUID, eid model.ExecutionID) error {
	call := (&fcall.AckCancelMemberParams{Flow: c.flowRef(flow),
		Member: string(eid)}).Call()
	if _, err := c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return fmt.Errorf("ack cancel of %s in flow %s: %w", eid, flow, err)
	}
	return nil
}

// EdgeParams describe one dependency edge, for StageDependencyEdge and
// ApplyDependencyToChild.
type EdgeParams struct {
	Flow       model.UUID
	EdgeID     model.UUID
	Upstream   model.ExecutionID
	Downstream model.ExecutionID
	// Kind defaults to DefaultDependencyKind.
	Kind string
	// DataPassingRef, when set, copies the upstream's result over the
	// downstream's payload on satisfaction.
	DataPassingRef string
	// GraphRevision is the expected flow revision (stage) or the revision
	// the edge was staged at (apply).
	GraphRevision int64
	NowMs         int64
}

func (p *EdgeParams) kind() string {
	if p.Kind == "" {
		return DefaultDependencyKind
	}
	return p.Kind
}

// edge is p for model/fcall's layouts.
func (c *Client) edge(p *EdgeParams) *fcall.DependencyEdge {
	return &fcall.DependencyEdge{Flow: c.flowRef(p.Flow), EdgeID: p.EdgeID.String(), Upstream: p.Upstream,
		Downstream: p.Downstream, Kind: p.kind(), DataPassingRef: p.DataPassingRef, GraphRevision: p.GraphRevision,
		NowMs: p.NowMs}
}

// StageDependencyEdge calls ff_stage_dependency_edge and returns the new
// graph revision. Follow it with ApplyDependencyToChild.
//
//	KEYS[1] flow_core  KEYS[2] members  KEYS[3] edge  KEYS[4] out:<upstream>
//	KEYS[5] in:<downstream>  KEYS[6] grant:<edge> (unused)
//	ARGV[1] flow_id  ARGV[2] edge_id  ARGV[3] upstream  ARGV[4] downstream  ARGV[5] kind
//	ARGV[6] data_passing_ref  ARGV[7] expected_graph_revision  ARGV[8] now_ms
func (c *Client) StageDependencyEdge(ctx context.Context, p *EdgeParams) (int64, error) {
	call := c.edge(p).StageCall()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, fmt.Errorf("stage edge %s (%s -> %s): %w", p.EdgeID, p.Upstream, p.Downstream, err)
	}
	return fcall.DecodeStageEdge(rep)
}

// SetEdgeGroupPolicy calls ff_set_edge_group_policy for the inbound edges
// of downstream; it must precede the first applied edge. It returns "set"
// or "already_set".
//
//	KEYS[1] flow_core  KEYS[2] edgegroup:<downstream>
//	ARGV[1] policy_variant  ARGV[2] on_satisfied  ARGV[3] k  ARGV[4] now_ms
func (c *Client) SetEdgeGroupPolicy(ctx context.Context, flow model.UUID, downstream model.ExecutionID, variant, onSatisfied string, k int, nowMs int64) (string, error) {
	call := (&fcall.SetEdgeGroupPolicyParams{Flow: c.flowRef(flow), Downstream: downstream, Variant: variant,
		OnSatisfied: onSatisfied, K: k, NowMs: nowMs}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", fmt.Errorf("set edge group policy of %s: %w", downstream, err)
	}
	return rep.Field(0), nil
}

// ApplyDependencyToChild calls ff_apply_dependency_to_child after the edge
// was staged. It pre-reads the child's lane_id and returns the child's
// unsatisfied count ("already_applied" on a repeat, as a reply status in
// the second result).
//
//	KEYS[1] exec_core  KEYS[2] deps_meta  KEYS[3] deps_unresolved  KEYS[4] dep:<edge>
//	KEYS[5] lane eligible  KEYS[6] lane blocked:dependencies  KEYS[7] deps_all_edges
//	KEYS[8] edgegroup:<child>
//	ARGV[1] flow_id  ARGV[2] edge_id  ARGV[3] upstream  ARGV[4] graph_revision  ARGV[5] kind
//	ARGV[6] data_passing_ref  ARGV[7] now_ms
func (c *Client) ApplyDependencyToChild(ctx context.Context, p *EdgeParams) (unsatisfied int64, alreadyApplied bool, err error) {
	f, err := c.famCoreFields(ctx, p.Downstream, "lane_id")
	if err != nil {
		return 0, false, err
	}
	call := c.applyDependencyCall(famLane(f[0]), p)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, false, fmt.Errorf("apply edge %s to %s: %w", p.EdgeID, p.Downstream, err)
	}
	return applyDependencyResult(rep)
}

func (c *Client) applyDependencyCall(lane string, p *EdgeParams) Call {
	return c.edge(p).ApplyCall(lane)
}

func applyDependencyResult(rep *Reply) (int64, bool, error) { return fcall.DecodeApplyDependency(rep) }

// ApplyDependenciesToChild applies staged edges that all lead to one
// child in a single MULTI/EXEC transaction (the child and its flow share a
// slot), so nothing runs between them: no resolution of one edge can make
// the child eligible while another of its edges is not applied yet. It
// returns the child's unsatisfied count after the last edge (already
// applied edges are skipped by the function and leave it unchanged). The
// child also leaves its lane:delayed in that transaction (see
// applyEdgesTx).
func (c *Client) ApplyDependenciesToChild(ctx context.Context, child model.ExecutionID, edges []*EdgeParams) (int64, error) {
	if len(edges) == 0 {
		return 0, nil
	}
	for _, p := range edges {
		if p.Downstream != child {
			return 0, fmt.Errorf("apply edges to %s: edge %s leads to %s", child, p.EdgeID, p.Downstream)
		}
	}
	f, err := c.famCoreFields(ctx, child, "lane_id")
	if err != nil {
		return 0, err
	}
	replies, err := c.applyEdgesTx(ctx, child, famLane(f[0]), edges, true)
	if err != nil {
		return 0, fmt.Errorf("apply %d edges to %s: %w", len(edges), child, err)
	}
	var unsatisfied int64
	for i, msg := range replies {
		if err := msg.Error(); err != nil {
			return 0, fmt.Errorf("apply edge %s to %s: %w", edges[i].EdgeID, child, err)
		}
		rep, err := parseReply("ff_apply_dependency_to_child", msg)
		if err != nil {
			return 0, fmt.Errorf("apply edge %s to %s: %w", edges[i].EdgeID, child, err)
		}
		n, already, err := applyDependencyResult(rep)
		if err != nil {
			return 0, fmt.Errorf("apply edge %s to %s: %w", edges[i].EdgeID, child, err)
		}
		if !already {
			unsatisfied = n
		}
	}
	return unsatisfied, nil
}

// applyEdgesTx sends MULTI, one FCALL per edge, a ZREM of the child from
// its lane:delayed, EXEC, and returns the FCALLs' replies. The ZREM is
// there because ff_apply_dependency_to_child blocks a delayed child (the
// SDK holds a dependent member delayed until its edges are applied) on
// its dependencies but leaves only lane:eligible (upstream's behaviour,
// kept on the wire): without it the child sat in lane:delayed and
// blocked:dependencies at once until a separate ZREM, which the index
// reconciler caught in a plain demo run. When the server lacks the
// library (a queued command or a reply says so) it reloads it and, if
// reload is set, runs the transaction once more: applying is idempotent.
func (c *Client) applyEdgesTx(ctx context.Context, child model.ExecutionID, lane string, edges []*EdgeParams, reload bool) ([]vk.ValkeyMessage, error) {
	cmds := make(vk.Commands, 0, len(edges)+3)
	cmds = append(cmds, c.c.B().Multi().Build())
	for _, p := range edges {
		call := c.applyDependencyCall(lane, p)
		cmds = append(cmds, c.fcallCmd(call.Function, call.Keys, call.Args))
	}
	cmds = append(cmds, c.c.B().Zrem().Key(model.KeysOn(child.Partition()).LaneDelayed(lane)).Member(string(child)).Build())
	cmds = append(cmds, c.c.B().Exec().Build())
	res := c.c.DoMulti(ctx, cmds...)
	replies, err := res[len(res)-1].ToArray()
	missing := err
	if !isFunctionMissing(missing) {
		missing = nil
		for _, r := range res[:len(res)-1] {
			if isFunctionMissing(r.Error()) {
				missing = r.Error()
			}
		}
		for _, m := range replies {
			if isFunctionMissing(m.Error()) {
				missing = m.Error()
			}
		}
	}
	if missing != nil && reload {
		if err := c.reload(ctx, missing); err != nil {
			return nil, err
		}
		return c.applyEdgesTx(ctx, child, lane, edges, false)
	}
	if err != nil {
		return nil, fmt.Errorf("MULTI/EXEC: %w", err)
	}
	if len(replies) != len(edges)+1 {
		return nil, fmt.Errorf("%w: EXEC returned %d replies for %d calls", ErrMalformedReply, len(replies), len(edges)+1)
	}
	if err := replies[len(edges)].Error(); err != nil {
		return nil, fmt.Errorf("leave lane:delayed: %w", err)
	}
	return replies[:len(edges)], nil
}

// ResolveDependencyParams are the inputs of ResolveDependency.
type ResolveDependencyParams struct {
	Flow       model.UUID
	EdgeID     string
	Upstream   model.ExecutionID
	Downstream model.ExecutionID
	// UpstreamOutcome is the upstream's terminal_outcome ("success" or
	// anything else).
	UpstreamOutcome string
	NowMs           int64
	// Legacy sends the 11-KEYS / 3-ARGV form (all_of only, no sibling
	// cancel bookkeeping).
	Legacy bool
}

// ResolveResult is ResolveDependency's reply (fcall.ResolveResult).
type ResolveResult = fcall.ResolveResult

// ResolveDependency calls ff_resolve_dependency as the partition router
// does: it pre-reads the child's lane_id and current_attempt_index.
//
//	KEYS[1] exec_core  KEYS[2] deps_meta  KEYS[3] deps_unresolved  KEYS[4] dep:<edge>
//	KEYS[5] lane eligible  KEYS[6] lane terminal  KEYS[7] lane blocked:dependencies
//	KEYS[8] attempt(idx)  KEYS[9] stream meta(idx)  KEYS[10] child payload
//	KEYS[11] upstream result (on the child's tag)  KEYS[12] edgegroup:<child>
//	KEYS[13] in:<child>  KEYS[14] ff:idx:{fp:N}:pending_cancel_groups
//	ARGV[1] edge_id  ARGV[2] upstream outcome  ARGV[3] now_ms  ARGV[4] flow_id
//	ARGV[5] downstream eid
func (c *Client) ResolveDependency(ctx context.Context, p *ResolveDependencyParams) (*ResolveResult, error) {
	f, err := c.famCoreFields(ctx, p.Downstream, "lane_id", "current_attempt_index")
	if err != nil {
		return nil, err
	}
	lane := famLane(f[0])
	att, perr := strconv.Atoi(f[1])
	if perr != nil {
		att = 0
	}
	call := (&fcall.ResolveDependencyParams{Downstream: p.Downstream, Upstream: p.Upstream, EdgeID: p.EdgeID,
		UpstreamOutcome: p.UpstreamOutcome, Lane: lane, AttemptIndex: att, Flow: c.flowRef(p.Flow), NowMs: p.NowMs, Legacy: p.Legacy}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("resolve edge %s of %s: %w", p.EdgeID, p.Downstream, err)
	}
	return fcall.DecodeResolveDependency(rep), nil
}

// maxCascadeDepth bounds CascadeCompletion's recursion into skipped
// children, like FlowFabric's router.
const maxCascadeDepth = 50

// CascadeCompletion resolves every outgoing edge of a terminal flow member
// the way FlowFabric's partition router does after a ff:dag:completions
// message: it re-reads the upstream's terminal_outcome, resolves each edge
// with ResolveDependency, and recurses into children that were skipped.
// It returns the number of edges resolved (including recursion).
func (c *Client) CascadeCompletion(ctx context.Context, flow model.UUID, eid model.ExecutionID, nowMs int64) (int, error) {
	return c.cascade(ctx, flow, eid, nowMs, 0)
}

func (c *Client) cascade(ctx context.Context, flow model.UUID, eid model.ExecutionID, nowMs int64, depth int) (int, error) {
	if depth > maxCascadeDepth {
		return 0, nil
	}
	outcome, err := c.c.Do(ctx, c.c.B().Hget().Key(model.KeysFor(eid).Core()).Field("terminal_outcome").Build()).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		return 0, fmt.Errorf("cascade %s: %w", eid, err)
	}
	fk := c.flowKeys(flow)
	edges, err := c.c.Do(ctx, c.c.B().Smembers().Key(fk.Outgoing(eid)).Build()).AsStrSlice()
	if err != nil {
		return 0, fmt.Errorf("cascade %s: %w", eid, err)
	}
	resolved := 0
	var skipped []model.ExecutionID
	for _, edge := range edges {
		down, err := c.c.Do(ctx, c.c.B().Hget().Key(fk.Edge(edge)).Field("downstream_execution_id").Build()).ToString()
		if err != nil || down == "" {
			continue
		}
		child, err := model.ParseExecutionID(down)
		if err != nil {
			continue
		}
		r, err := c.ResolveDependency(ctx, &ResolveDependencyParams{Flow: flow, EdgeID: edge, Upstream: eid,
			Downstream: child, UpstreamOutcome: outcome, NowMs: nowMs})
		if err != nil {
			if errors.Is(err, CodeInvalidDependency) {
				// Staged, not applied to the child yet: the SDK applies a
				// member's edges after staging them and resolves finished
				// parents itself then, so this is the expected race of a
				// parent finishing first, not a fault.
				c.log.Debug("cascade: edge not applied to its child yet; the child's add resolves it", "edge", edge, "child", child)
				continue
			}
			c.log.Warn("cascade: resolve failed", "edge", edge, "child", child, "error", err)
			continue
		}
		resolved++
		if r.ChildSkipped() {
			skipped = append(skipped, child)
		}
	}
	for _, child := range skipped {
		n, err := c.cascade(ctx, flow, child, nowMs, depth+1)
		resolved += n
		if err != nil {
			return resolved, err
		}
	}
	return resolved, nil
}

// DrainSiblingCancelGroup calls ff_drain_sibling_cancel_group after every
// listed sibling was cancelled. It returns drained, drained_sans_group or
// already_drained.
//
//	KEYS[1] ff:idx:{fp:N}:pending_cancel_groups  KEYS[2] edgegroup:<downstream>
//	ARGV[1] flow_id  ARGV[2] downstream eid
func (c *Client) DrainSiblingCancelGroup(ctx context.Context, flow model.UUID, downstream model.ExecutionID) (string, error) {
	call := c.cancelGroup(flow, downstream).Drain()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", fmt.Errorf("drain sibling cancel group %s|%s: %w", flow, downstream, err)
	}
	return rep.Field(0), nil
}

// ReconcileSiblingCancelGroup calls ff_reconcile_sibling_cancel_group. It
// returns the disposition (no_op, sremmed_stale, completed_drain) and its
// detail.
//
//	KEYS[1] ff:idx:{fp:N}:pending_cancel_groups  KEYS[2] edgegroup:<downstream>
//	ARGV[1] flow_id  ARGV[2] downstream eid
func (c *Client) ReconcileSiblingCancelGroup(ctx context.Context, flow model.UUID, downstream model.ExecutionID) (string, string, error) {
	call := c.cancelGroup(flow, downstream).Reconcile()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", "", fmt.Errorf("reconcile sibling cancel group %s|%s: %w", flow, downstream, err)
	}
	return rep.Field(0), rep.Field(1), nil
}

func (c *Client) cancelGroup(flow model.UUID, downstream model.ExecutionID) *fcall.SiblingCancelGroup {
	return &fcall.SiblingCancelGroup{Flow: c.flowRef(flow), Downstream: downstream}
}

// EvaluateFlowEligibility calls ff_evaluate_flow_eligibility (read-only):
// not_found, not_runnable, owned, terminal, eligible, impossible or
// blocked_by_dependencies.
//
//	KEYS[1] exec_core  KEYS[2] deps_meta
func (c *Client) EvaluateFlowEligibility(ctx context.Context, eid model.ExecutionID) (string, error) {
	call := fcall.EvaluateFlowEligibilityCall(eid)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", fmt.Errorf("evaluate flow eligibility of %s: %w", eid, err)
	}
	return rep.Field(0), nil
}

// PromoteBlockedToEligible calls ff_promote_blocked_to_eligible for a child
// blocked on dependencies that has none left. It pre-reads lane_id.
//
//	KEYS[1] exec_core  KEYS[2] lane blocked:dependencies  KEYS[3] lane eligible
//	KEYS[4] deps_meta  KEYS[5] deps_unresolved
//	ARGV[1] execution_id  ARGV[2] now_ms
func (c *Client) PromoteBlockedToEligible(ctx context.Context, eid model.ExecutionID, nowMs int64) error {
	f, err := c.famCoreFields(ctx, eid, "lane_id")
	if err != nil {
		return err
	}
	call := (&fcall.PromoteBlockedToEligibleParams{ExecutionID: eid, Lane: famLane(f[0]), NowMs: nowMs}).Call()
	if _, err := c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return fmt.Errorf("promote %s: %w", eid, err)
	}
	return nil
}

// ReplayExecution calls ff_replay_execution on a terminal execution and
// returns the reply's count (unsatisfied edges of a replayed skipped flow
// member, else 0). It pre-reads lane_id, terminal_outcome and flow_id; for
// a skipped flow member it passes one dep key per inbound edge of the flow.
//
//	KEYS[1] exec_core  KEYS[2] lane terminal  KEYS[3] lane eligible  KEYS[4] lease_history
//	[KEYS[5] lane blocked:dependencies  KEYS[6] deps_meta  KEYS[7] deps_unresolved
//	 KEYS[8..] dep:<edge> per edge of in:<eid>]
//	ARGV[1] execution_id  ARGV[2] now_ms (ignored)  [ARGV[3..] edge ids]
func (c *Client) ReplayExecution(ctx context.Context, eid model.ExecutionID, nowMs int64) (int64, error) {
	f, err := c.famCoreFields(ctx, eid, "lane_id", "terminal_outcome", "flow_id")
	if err != nil {
		return 0, err
	}
	q := fcall.ReplayExecutionParams{ExecutionID: eid, Lane: famLane(f[0]), NowMs: nowMs}
	if f[1] == model.OutcomeSkipped && f[2] != "" {
		flow, err := model.ParseUUID(f[2])
		if err != nil {
			return 0, fmt.Errorf("replay %s: flow_id %q: %w", eid, f[2], err)
		}
		edges, err := c.c.Do(ctx, c.c.B().Smembers().Key(c.flowKeys(flow).Incoming(eid)).Build()).AsStrSlice()
		if err != nil {
			return 0, fmt.Errorf("replay %s: inbound edges: %w", eid, err)
		}
		q.SkippedFlowMember, q.Edges = true, edges
	}
	call := q.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, fmt.Errorf("replay %s: %w", eid, err)
	}
	return rep.Int(0)
}

// SetFlowTags calls ff_set_flow_tags with key/value pairs (keys must look
// like "<caller>.<field>") and returns the number of pairs written.
//
//	KEYS[1] flow_core  KEYS[2] flow tags
//	ARGV k1, v1, k2, v2, ...
func (c *Client) SetFlowTags(ctx context.Context, flow model.UUID, pairs ...string) (int64, error) {
	call := fcall.SetFlowTagsCall(c.flowRef(flow), pairs)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, fmt.Errorf("set tags of flow %s: %w", flow, err)
	}
	return rep.Int(0)
}
