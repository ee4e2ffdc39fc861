package valkey_test

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

func TestCreateFlowAndAddMembers(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	before, _ := c.ServerTime(ctx)
	flow, fk := famFlow(t, c)
	pk := model.KeysOn(c.Partitions().FlowPartition(flow))
	core := famHash(t, c, fk.Core())
	famWantFields(t, c, fk.Core(), map[string]string{
		"flow_id": flow.String(), "flow_kind": "dag", "namespace": "ns", "graph_revision": "0",
		"node_count": "0", "edge_count": "0", "public_flow_state": "open"})
	created, _ := strconv.ParseInt(core["created_at"], 10, 64)
	if created < before || created > before+5000 || core["last_mutation_at"] != core["created_at"] || len(core) != 9 {
		t.Fatalf("flow core = %v (server time %d; ARGV now_ms must be ignored)", core, before)
	}
	if !famIsMember(t, c, pk.FlowIndex(), flow.String()) {
		t.Fatal("not in flow_index")
	}
	// Idempotent; flow_index healed before the guard.
	c.Raw().Do(ctx, c.Raw().B().Del().Key(pk.FlowIndex()).Build())
	if existed, err := c.CreateFlow(ctx, flow, "other", "x", 1); err != nil || !existed {
		t.Fatalf("second CreateFlow = %v, %v", existed, err)
	}
	if !famIsMember(t, c, pk.FlowIndex(), flow.String()) || famHash(t, c, fk.Core())["flow_kind"] != "dag" {
		t.Fatal("ALREADY_SATISFIED path wrong")
	}

	// Add members.
	a := c.Partitions().NewFlowExecutionID(flow)
	famSeedExec(t, c, a, "default", 1)
	c.Raw().Do(ctx, c.Raw().B().Del().Key(pk.FlowIndex()).Build())
	n, existed, err := c.AddExecutionToFlow(ctx, flow, a, famNow)
	if err != nil || n != 1 || existed {
		t.Fatalf("AddExecutionToFlow = %d %v %v", n, existed, err)
	}
	famWantFields(t, c, fk.Core(), map[string]string{"node_count": "1", "graph_revision": "1"})
	famWantFields(t, c, model.KeysFor(a).Core(), map[string]string{"flow_id": flow.String()})
	if !famIsMember(t, c, fk.Members(), string(a)) || !famIsMember(t, c, pk.FlowIndex(), flow.String()) {
		t.Fatal("membership / flow_index self-heal missing")
	}
	b := famMember(t, c, flow, "default", 2)
	// Already a member: ALREADY_SATISFIED with node_count; flow_id re-stamped.
	famHSet(t, c, model.KeysFor(b).Core(), "flow_id", "")
	famWantRaw(t, c, "ff_add_execution_to_flow",
		[]string{fk.Core(), fk.Members(), pk.FlowIndex(), model.KeysFor(b).Core()},
		[]string{flow.String(), string(b), "0"}, int64(1), "ALREADY_SATISFIED", string(b), "2")
	famWantFields(t, c, model.KeysFor(b).Core(), map[string]string{"flow_id": flow.String()})
	famWantFields(t, c, fk.Core(), map[string]string{"node_count": "2", "graph_revision": "2"})

	// Errors.
	other := model.NewUUID()
	stranger := c.Partitions().NewFlowExecutionID(flow)
	famSeedExec(t, c, stranger, "default", 3, "flow_id", other.String())
	_, _, err = c.AddExecutionToFlow(ctx, flow, stranger, famNow)
	if le := (*valkey.LuaError)(nil); !errors.As(err, &le) || string(le.Code) != valkey.AlreadyMemberOfDifferentFlowPrefix+other.String() {
		t.Fatalf("different flow: %v", err)
	}
	if famIsMember(t, c, fk.Members(), string(stranger)) {
		t.Fatal("stranger added")
	}
	famWantCode(t, func() error {
		_, _, err := c.AddExecutionToFlow(ctx, flow, c.Partitions().NewFlowExecutionID(flow), famNow)
		return err
	}(), valkey.CodeExecutionNotFound)
	missingFlow := model.NewUUID()
	famWantCode(t, func() error {
		e := c.Partitions().NewFlowExecutionID(missingFlow)
		famSeedExec(t, c, e, "default", 1)
		_, _, err := c.AddExecutionToFlow(ctx, missingFlow, e, famNow)
		return err
	}(), valkey.CodeFlowNotFound)
	if _, _, err := c.AddExecutionToFlow(ctx, flow, model.NewExecutionID(model.Partition{Index: c.Partitions().FlowPartition(flow).Index + 1}, model.NewUUID()), famNow); !errors.Is(err, valkey.ErrWrongFlowPartition) {
		t.Fatalf("wrong partition: %v", err)
	}
	famHSet(t, c, fk.Core(), "public_flow_state", "cancelled")
	late := c.Partitions().NewFlowExecutionID(flow)
	famSeedExec(t, c, late, "default", 1)
	_, _, err = c.AddExecutionToFlow(ctx, flow, late, famNow)
	famWantCode(t, err, valkey.CodeFlowAlreadyTerminal)
	famWantFields(t, c, model.KeysFor(late).Core(), map[string]string{"flow_id": ""})
}

func TestStageDependencyEdge(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	flow, fk := famFlow(t, c)
	a := famMember(t, c, flow, "default", 1)
	b := famMember(t, c, flow, "default", 2)
	d := famMember(t, c, flow, "default", 3)
	edge := model.NewUUID()
	p := &valkey.EdgeParams{Flow: flow, EdgeID: edge, Upstream: a, Downstream: b, DataPassingRef: "result",
		GraphRevision: 3, NowMs: famNow}
	rev, err := c.StageDependencyEdge(ctx, p)
	if err != nil || rev != 4 {
		t.Fatalf("StageDependencyEdge = %d, %v", rev, err)
	}
	famWantFields(t, c, fk.Edge(edge.String()), map[string]string{
		"edge_id": edge.String(), "flow_id": flow.String(), "upstream_execution_id": string(a),
		"downstream_execution_id": string(b), "dependency_kind": "success_only",
		"satisfaction_condition": "all_required", "data_passing_ref": "result", "edge_state": "pending",
		"created_at": "1700000000000", "created_by": "engine"})
	if len(famHash(t, c, fk.Edge(edge.String()))) != 10 {
		t.Fatal("edge hash field count")
	}
	if !famIsMember(t, c, fk.Outgoing(a), edge.String()) || !famIsMember(t, c, fk.Incoming(b), edge.String()) {
		t.Fatal("adjacency sets")
	}
	famWantFields(t, c, fk.Core(), map[string]string{"graph_revision": "4", "edge_count": "1", "last_mutation_at": "1700000000000"})
	if famExists(t, c, fk.Grant(edge.String())) {
		t.Fatal("grant key written")
	}

	stage := func(id model.UUID, up, down model.ExecutionID, rev int64) error {
		_, err := c.StageDependencyEdge(ctx, &valkey.EdgeParams{Flow: flow, EdgeID: id, Upstream: up, Downstream: down, GraphRevision: rev, NowMs: famNow})
		return err
	}
	famWantCode(t, stage(model.NewUUID(), a, a, 4), valkey.CodeSelfReferencingEdge)
	famWantCode(t, stage(model.NewUUID(), b, d, 3), valkey.CodeStaleGraphRevision)
	famWantCode(t, stage(model.NewUUID(), b, c.Partitions().NewFlowExecutionID(flow), 4), valkey.CodeExecutionNotInFlow)
	famWantCode(t, stage(edge, a, b, 4), valkey.CodeDependencyAlreadyExists)
	if err := stage(model.NewUUID(), b, d, 4); err != nil {
		t.Fatal(err)
	}
	// a -> b -> d; d -> a closes a cycle.
	famWantCode(t, stage(model.NewUUID(), d, a, 5), valkey.CodeCycleDetected)
	famWantCode(t, stage(model.NewUUID(), b, a, 5), valkey.CodeCycleDetected)
	famWantFields(t, c, fk.Core(), map[string]string{"graph_revision": "5", "edge_count": "2"})
	missing := model.NewUUID()
	_, err = c.StageDependencyEdge(ctx, &valkey.EdgeParams{Flow: missing, EdgeID: model.NewUUID(), Upstream: a, Downstream: b, NowMs: famNow})
	famWantCode(t, err, valkey.CodeFlowNotFound)
	famHSet(t, c, fk.Core(), "public_flow_state", "cancelled")
	famWantCode(t, stage(model.NewUUID(), a, d, 5), valkey.CodeFlowAlreadyTerminal)
}

func TestSetEdgeGroupPolicyAndApply(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	flow, fk := famFlow(t, c)
	a := famMember(t, c, flow, "default", 1)
	b := famMember(t, c, flow, "default", 2)
	d := famMember(t, c, flow, "lane-x", 30)
	set := func(down model.ExecutionID, variant, on string, k int) (string, error) {
		return c.SetEdgeGroupPolicy(ctx, flow, down, variant, on, k, famNow)
	}
	for name, tc := range map[string]struct {
		variant, on string
		k           int
		detail      string
	}{
		"variant":  {"some_of", "let_run", 1, "unsupported_policy_variant: some_of"},
		"quorum_k": {"quorum", "let_run", 0, "quorum k must be >= 1"},
		"on_sat":   {"any_of", "", 0, "on_satisfied required for any_of/quorum: cancel_remaining | let_run"},
	} {
		_, err := set(d, tc.variant, tc.on, tc.k)
		var le *valkey.LuaError
		if !errors.As(err, &le) || le.Code != valkey.CodeInvalidInput || le.Detail(0) != tc.detail {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := c.SetEdgeGroupPolicy(ctx, model.NewUUID(), d, "any_of", "let_run", 0, famNow)
	famWantCode(t, err, valkey.CodeFlowNotFound)

	if s, err := set(d, "quorum", "cancel_remaining", 2); err != nil || s != "set" {
		t.Fatalf("set = %q %v", s, err)
	}
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{
		"policy_variant": "quorum", "on_satisfied": "cancel_remaining", "k": "2", "n": "0", "succeeded": "0",
		"failed": "0", "skipped": "0", "group_state": "pending", "created_at": "1700000000000"})
	if s, err := set(d, "quorum", "let_run", 3); err != nil || s != "already_set" {
		t.Fatalf("restate = %q %v", s, err)
	}
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"k": "2", "on_satisfied": "cancel_remaining"})

	// Apply: dep edge, counters, group n, child blocked.
	e1 := model.NewUUID()
	p := &valkey.EdgeParams{Flow: flow, EdgeID: e1, Upstream: a, Downstream: d, GraphRevision: 3, NowMs: famNow + 7, DataPassingRef: "r"}
	if _, err := c.StageDependencyEdge(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.GraphRevision = 4
	n, already, err := c.ApplyDependencyToChild(ctx, p)
	if err != nil || n != 1 || already {
		t.Fatalf("apply = %d %v %v", n, already, err)
	}
	dk := model.KeysFor(d)
	famWantFields(t, c, dk.DepEdge(e1.String()), map[string]string{
		"edge_id": e1.String(), "flow_id": flow.String(), "upstream_execution_id": string(a),
		"downstream_execution_id": string(d), "dependency_kind": "success_only", "state": "unsatisfied",
		"data_passing_ref": "r", "last_resolved_at": ""})
	famWantFields(t, c, dk.DepsMeta(), map[string]string{"unsatisfied_required_count": "1", "flow_id": flow.String(),
		"last_flow_graph_revision": "4", "last_dependency_update_at": "1700000000007"})
	famWantFields(t, c, dk.Core(), map[string]string{
		"lifecycle_phase": "runnable", "ownership_state": "unowned", "eligibility_state": "blocked_by_dependencies",
		"blocking_reason": "waiting_for_children", "blocking_detail": "1 dep(s) unresolved incl " + e1.String(),
		"terminal_outcome": "none", "attempt_state": "pending_first_attempt", "public_state": "waiting_children",
		"last_transition_at": "1700000000007"})
	pk := model.KeysOn(d.Partition())
	if _, ok := famScore(t, c, pk.LaneEligible("lane-x"), string(d)); ok {
		t.Fatal("child still eligible")
	}
	if s, ok := famScore(t, c, pk.LaneBlockedDependencies("lane-x"), string(d)); !ok || s != 30 {
		t.Fatalf("blocked:dependencies score %v %v", s, ok)
	}
	if !famIsMember(t, c, dk.DepsUnresolved(), e1.String()) || !famIsMember(t, c, dk.DepsAllEdges(), e1.String()) {
		t.Fatal("unresolved / all_edges")
	}
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"n": "1", "policy_variant": "quorum"})
	// Repeat: already_applied, nothing changes.
	if _, already, err := c.ApplyDependencyToChild(ctx, p); err != nil || !already {
		t.Fatalf("reapply = %v %v", already, err)
	}
	famWantFields(t, c, dk.DepsMeta(), map[string]string{"unsatisfied_required_count": "1"})
	// The policy is now fixed.
	_, err = set(d, "any_of", "let_run", 0)
	if le := (*valkey.LuaError)(nil); !errors.As(err, &le) || le.Detail(0) != "edge_group_policy_already_fixed: dependencies already staged" {
		t.Fatalf("fixed policy: %v", err)
	}

	// No explicit policy: the first apply writes an all_of group.
	e2 := famEdge(t, c, flow, a, b, "")
	famWantFields(t, c, fk.EdgeGroup(b), map[string]string{"policy_variant": "all_of", "n": "1", "succeeded": "0", "group_state": "pending"})
	if len(famHash(t, c, fk.EdgeGroup(b))) != 4 {
		t.Fatalf("default group = %v", famHash(t, c, fk.EdgeGroup(b)))
	}
	_ = e2

	// Errors.
	ghost := c.Partitions().NewFlowExecutionID(flow)
	_, _, err = c.ApplyDependencyToChild(ctx, &valkey.EdgeParams{Flow: flow, EdgeID: model.NewUUID(), Upstream: a, Downstream: ghost, NowMs: famNow})
	famWantCode(t, err, valkey.CodeExecutionNotFound)
	_, _, err = c.ApplyDependencyToChild(ctx, &valkey.EdgeParams{Flow: model.NewUUID(), EdgeID: model.NewUUID(), Upstream: a, Downstream: b, NowMs: famNow})
	famWantCode(t, err, valkey.CodeExecutionAlreadyInFlow)

	// A terminal child gets the dep but is not re-blocked.
	famFinish(t, c, a, "success")
	x := model.NewUUID()
	famWantRaw(t, c, "ff_apply_dependency_to_child",
		[]string{model.KeysFor(a).Core(), model.KeysFor(a).DepsMeta(), model.KeysFor(a).DepsUnresolved(),
			model.KeysFor(a).DepEdge(x.String()), pk.LaneEligible("default"), pk.LaneBlockedDependencies("default"),
			model.KeysFor(a).DepsAllEdges(), ""},
		[]string{flow.String(), x.String(), string(b), "9", "success_only", "", "5"}, int64(1), "OK", "1")
	famWantFields(t, c, model.KeysFor(a).Core(), map[string]string{"lifecycle_phase": "terminal"})
}

// The acceptance diamond: A→B, A→C, B,C→D, driven to completion by
// resolving edges the way the partition router does.
func TestDiamondDAG(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 20*time.Second)
	flow, fk := famFlow(t, c)
	a := famMember(t, c, flow, "default", 10)
	b := famMember(t, c, flow, "default", 20)
	cc := famMember(t, c, flow, "default", 30)
	d := famMember(t, c, flow, "default", 40)
	ab := famEdge(t, c, flow, a, b, "a.result")
	famEdge(t, c, flow, a, cc, "")
	bd := famEdge(t, c, flow, b, d, "")
	famEdge(t, c, flow, cc, d, "")
	pk := model.KeysOn(c.Partitions().FlowPartition(flow))
	famWantFields(t, c, fk.Core(), map[string]string{"graph_revision": "8", "edge_count": "4", "node_count": "4"})
	famWantFields(t, c, model.KeysFor(d).DepsMeta(), map[string]string{"unsatisfied_required_count": "2"})
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"n": "2", "policy_variant": "all_of"})

	eligible := func(e model.ExecutionID) bool {
		_, ok := famScore(t, c, pk.LaneEligible("default"), string(e))
		return ok
	}
	if !eligible(a) || eligible(b) || eligible(cc) || eligible(d) {
		t.Fatal("only A should be eligible")
	}
	for e, want := range map[model.ExecutionID]string{a: "eligible", b: "blocked_by_dependencies", d: "blocked_by_dependencies"} {
		if got, err := c.EvaluateFlowEligibility(ctx, e); err != nil || got != want {
			t.Fatalf("evaluate %s = %q %v, want %s", e, got, err, want)
		}
	}

	// A completes with a result; its cascade satisfies B (injecting the
	// result) and C.
	c.Raw().Do(ctx, c.Raw().B().Set().Key(model.KeysFor(a).Result()).Value(`{"v":1}`).Build())
	famFinish(t, c, a, "success")
	if n, err := c.CascadeCompletion(ctx, flow, a, famNow+100); err != nil || n != 2 {
		t.Fatalf("cascade A = %d %v", n, err)
	}
	if !eligible(b) || !eligible(cc) || eligible(d) {
		t.Fatal("after A: B and C eligible, D blocked")
	}
	if got := famGet(t, c, model.KeysFor(b).Payload()); got != `{"v":1}` {
		t.Fatalf("B payload = %q", got)
	}
	if famExists(t, c, model.KeysFor(cc).Payload()) {
		t.Fatal("C payload injected without data_passing_ref")
	}
	famWantFields(t, c, model.KeysFor(b).Core(), map[string]string{
		"eligibility_state": "eligible_now", "blocking_reason": "waiting_for_worker", "blocking_detail": "",
		"attempt_state": "pending_first_attempt", "public_state": "waiting", "last_transition_at": "1700000000100"})
	famWantFields(t, c, model.KeysFor(b).DepEdge(ab.String()), map[string]string{"state": "satisfied", "last_resolved_at": "1700000000100"})
	famWantFields(t, c, model.KeysFor(b).DepsMeta(), map[string]string{"unsatisfied_required_count": "0"})
	famWantFields(t, c, fk.EdgeGroup(b), map[string]string{"succeeded": "1", "group_state": "satisfied"})
	if _, ok := famScore(t, c, pk.LaneBlockedDependencies("default"), string(b)); ok {
		t.Fatal("B still in blocked:dependencies")
	}
	if s, _ := famScore(t, c, pk.LaneEligible("default"), string(b)); s != 20 {
		t.Fatalf("B eligible score %v", s)
	}
	// Repeat delivery is idempotent.
	r, err := c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: ab.String(), Upstream: a,
		Downstream: b, UpstreamOutcome: "success", NowMs: famNow + 200})
	if err != nil || *r != (valkey.ResolveResult{Resolution: "already_resolved"}) {
		t.Fatalf("repeat resolve = %+v %v", r, err)
	}

	// B completes: D has one edge left.
	famFinish(t, c, b, "success")
	if _, err := c.CascadeCompletion(ctx, flow, b, famNow+300); err != nil {
		t.Fatal(err)
	}
	if eligible(d) {
		t.Fatal("D eligible with C pending")
	}
	famWantFields(t, c, model.KeysFor(d).DepEdge(bd.String()), map[string]string{"state": "satisfied"})
	famWantFields(t, c, model.KeysFor(d).DepsMeta(), map[string]string{"unsatisfied_required_count": "1"})
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"succeeded": "1", "group_state": "pending"})

	// C completes: D becomes eligible.
	famFinish(t, c, cc, "success")
	if _, err := c.CascadeCompletion(ctx, flow, cc, famNow+400); err != nil {
		t.Fatal(err)
	}
	if !eligible(d) {
		t.Fatal("D not eligible after B and C")
	}
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"succeeded": "2", "group_state": "satisfied"})
	if got, _ := c.EvaluateFlowEligibility(ctx, d); got != "eligible" {
		t.Fatalf("evaluate D = %s", got)
	}
	famFinish(t, c, d, "success")
	if n, err := c.CascadeCompletion(ctx, flow, d, famNow+500); err != nil || n != 0 {
		t.Fatalf("cascade of the sink = %d %v", n, err)
	}
}

// An impossible dependency skips the child (terminal skipped, PUBLISH
// outcome skipped) and the cascade carries the skip to grandchildren.
func TestImpossibleDependencySkips(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 20*time.Second)
	wait := famCompletions(t, c)
	flow, fk := famFlow(t, c)
	a := famMember(t, c, flow, "default", 1)
	b := famMember(t, c, flow, "default", 2)
	d := famMember(t, c, flow, "default", 3)
	ab := famEdge(t, c, flow, a, b, "")
	bd := famEdge(t, c, flow, b, d, "")
	pk := model.KeysOn(c.Partitions().FlowPartition(flow))

	famFinish(t, c, a, "failed")
	if n, err := c.CascadeCompletion(ctx, flow, a, famNow+10); err != nil || n != 2 {
		t.Fatalf("cascade = %d %v", n, err)
	}
	for _, e := range []model.ExecutionID{b, d} {
		famWantFields(t, c, model.KeysFor(e).Core(), map[string]string{
			"lifecycle_phase": "terminal", "ownership_state": "unowned", "eligibility_state": "not_applicable",
			"blocking_reason": "none", "blocking_detail": "", "terminal_outcome": "skipped",
			"attempt_state": "none", "public_state": "skipped", "completed_at": "1700000000010",
			"last_transition_at": "1700000000010"})
		if s, ok := famScore(t, c, pk.LaneTerminal("default"), string(e)); !ok || s != float64(famNow+10) {
			t.Fatalf("%s terminal score %v %v", e, s, ok)
		}
		if _, ok := famScore(t, c, pk.LaneBlockedDependencies("default"), string(e)); ok {
			t.Fatalf("%s still blocked", e)
		}
		msg := wait(e)
		if msg["flow_id"] != flow.String() || msg["outcome"] != "skipped" || len(msg) != 3 {
			t.Fatalf("completion of %s = %v", e, msg)
		}
	}
	famWantFields(t, c, model.KeysFor(b).DepEdge(ab.String()), map[string]string{"state": "impossible", "last_resolved_at": "1700000000010"})
	famWantFields(t, c, model.KeysFor(b).DepsMeta(), map[string]string{"unsatisfied_required_count": "0", "impossible_required_count": "1"})
	famWantFields(t, c, fk.EdgeGroup(b), map[string]string{"failed": "1", "group_state": "impossible"})
	famWantFields(t, c, model.KeysFor(d).DepEdge(bd.String()), map[string]string{"state": "impossible"})
	if got, _ := c.EvaluateFlowEligibility(ctx, b); got != "not_runnable" {
		t.Fatalf("evaluate skipped = %s", got)
	}

	// An active child (running attempt) is skipped too: its attempt ends
	// and its stream closes, lease indexes are left alone.
	x := famMember(t, c, flow, "default", 4)
	y := famMember(t, c, flow, "default", 5)
	xy := famEdge(t, c, flow, x, y, "")
	yk := model.KeysFor(y)
	famHSet(t, c, yk.Core(), "lifecycle_phase", "active", "ownership_state", "leased", "eligibility_state", "not_applicable",
		"attempt_state", "running_attempt", "current_attempt_index", "2", "public_state", "active")
	famHSet(t, c, yk.Attempt(2), "attempt_state", "started")
	famHSet(t, c, yk.StreamMeta(2), "closed_at", "")
	c.Raw().Do(ctx, c.Raw().B().Zadd().Key(pk.LeaseExpiry()).ScoreMember().ScoreMember(1, string(y)).Build())
	famFinish(t, c, x, "cancelled")
	r, err := c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: xy.String(), Upstream: x,
		Downstream: y, UpstreamOutcome: "cancelled", NowMs: famNow + 20})
	if err != nil || *r != (valkey.ResolveResult{Resolution: "impossible", Effect: "child_skipped"}) || !r.ChildSkipped() {
		t.Fatalf("resolve active = %+v %v", r, err)
	}
	famWantFields(t, c, yk.Attempt(2), map[string]string{"attempt_state": "ended_cancelled", "ended_at": "1700000000020",
		"failure_reason": "dependency_impossible"})
	famWantFields(t, c, yk.StreamMeta(2), map[string]string{"closed_at": "1700000000020", "closed_reason": "dependency_impossible"})
	famWantFields(t, c, yk.Core(), map[string]string{"attempt_state": "attempt_terminal", "terminal_outcome": "skipped", "ownership_state": "unowned"})
	if _, ok := famScore(t, c, pk.LeaseExpiry(), string(y)); !ok {
		t.Fatal("lease_expiry cleaned (upstream leaves it to the scanners)")
	}
	wait(y)

	// Already terminal child: impossible without a skip.
	z := famMember(t, c, flow, "default", 6)
	w := famMember(t, c, flow, "default", 7)
	zw := famEdge(t, c, flow, z, w, "")
	famFinish(t, c, w, "cancelled")
	r, err = c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: zw.String(), Upstream: z,
		Downstream: w, UpstreamOutcome: "failed", NowMs: famNow + 30})
	if err != nil || *r != (valkey.ResolveResult{Resolution: "impossible"}) {
		t.Fatalf("resolve onto terminal = %+v %v", r, err)
	}

	// Errors and bad input.
	_, err = c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: model.NewUUID().String(),
		Upstream: a, Downstream: b, UpstreamOutcome: "success", NowMs: famNow})
	famWantCode(t, err, valkey.CodeInvalidDependency)
	bk := model.KeysFor(b)
	_, err = c.FCall(ctx, "ff_resolve_dependency", []string{bk.Core(), bk.DepsMeta(), bk.DepsUnresolved(), bk.DepEdge(ab.String()),
		"e", "t", "b", "a", "s", "p", "r"}, []string{ab.String(), "failed", "later"})
	famWantCode(t, err, valkey.CodeInvalidInput)
}

// The 11-KEYS / 3-ARGV call resolves as all_of and never touches edge
// groups or pending cancel groups.
func TestResolveDependencyLegacyForm(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	flow, fk := famFlow(t, c)
	a := famMember(t, c, flow, "default", 1)
	b := famMember(t, c, flow, "default", 2)
	d := famMember(t, c, flow, "default", 3)
	if _, err := c.SetEdgeGroupPolicy(ctx, flow, d, "any_of", "cancel_remaining", 0, famNow); err != nil {
		t.Fatal(err)
	}
	ad := famEdge(t, c, flow, a, d, "")
	bd := famEdge(t, c, flow, b, d, "")
	famFinish(t, c, a, "success")
	r, err := c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: ad.String(), Upstream: a,
		Downstream: d, UpstreamOutcome: "success", NowMs: famNow, Legacy: true})
	if err != nil || *r != (valkey.ResolveResult{Resolution: "satisfied"}) {
		t.Fatalf("legacy resolve = %+v %v", r, err)
	}
	// all_of semantics: one of two satisfied, still blocked; group untouched.
	famWantFields(t, c, model.KeysFor(d).Core(), map[string]string{"eligibility_state": "blocked_by_dependencies"})
	famWantFields(t, c, model.KeysFor(d).DepsMeta(), map[string]string{"unsatisfied_required_count": "1"})
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"succeeded": "0", "group_state": "pending"})
	r, err = c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: bd.String(), Upstream: b,
		Downstream: d, UpstreamOutcome: "success", NowMs: famNow, Legacy: true})
	if err != nil || r.Resolution != "satisfied" {
		t.Fatal(err)
	}
	famWantFields(t, c, model.KeysFor(d).Core(), map[string]string{"eligibility_state": "eligible_now"})
}

func famSiblingsGroup(t *testing.T, c *valkey.Client, variant, on string, k int) (model.UUID, model.FlowKeys, []model.ExecutionID, model.ExecutionID, []model.UUID) {
	t.Helper()
	ctx := valkeytest.Context(t, 10*time.Second)
	flow, fk := famFlow(t, c)
	ups := []model.ExecutionID{famMember(t, c, flow, "default", 1), famMember(t, c, flow, "default", 2), famMember(t, c, flow, "default", 3)}
	d := famMember(t, c, flow, "default", 4)
	if _, err := c.SetEdgeGroupPolicy(ctx, flow, d, variant, on, k, famNow); err != nil {
		t.Fatal(err)
	}
	var edges []model.UUID
	for _, u := range ups {
		edges = append(edges, famEdge(t, c, flow, u, d, ""))
	}
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"n": "3"})
	return flow, fk, ups, d, edges
}

func TestAnyOfCancelRemaining(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 20*time.Second)
	flow, fk, ups, d, edges := famSiblingsGroup(t, c, "any_of", "cancel_remaining", 0)
	pk := model.KeysOn(c.Partitions().FlowPartition(flow))
	// The third upstream is already terminal (failed) when the winner lands.
	famFinish(t, c, ups[2], "failed")

	famFinish(t, c, ups[0], "success")
	if _, err := c.CascadeCompletion(ctx, flow, ups[0], famNow+50); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{
		"succeeded": "1", "failed": "0", "group_state": "satisfied", "satisfied_at": "1700000000050",
		"cancel_siblings_pending_flag": "true", "cancel_siblings_reason": "sibling_quorum_satisfied",
		"cancel_siblings_pending_members": string(ups[1])})
	member := flow.String() + "|" + string(d)
	if got := famMembers(t, c, pk.PendingCancelGroups()); len(got) != 1 || got[0] != member {
		t.Fatalf("pending_cancel_groups = %v", got)
	}
	famWantFields(t, c, model.KeysFor(d).Core(), map[string]string{"eligibility_state": "eligible_now", "public_state": "waiting"})
	// deps_meta counters are not used by any_of.
	famWantFields(t, c, model.KeysFor(d).DepsMeta(), map[string]string{"unsatisfied_required_count": "3"})
	if famIsMember(t, c, model.KeysFor(d).DepsUnresolved(), edges[0].String()) {
		t.Fatal("resolved edge still unresolved")
	}

	// Reconciler while the loser still runs: no_op.
	if s, det, err := c.ReconcileSiblingCancelGroup(ctx, flow, d); err != nil || s != "no_op" || det != "siblings_running" {
		t.Fatalf("reconcile = %s %s %v", s, det, err)
	}
	// The loser finishes later: counters bump, nothing re-fires.
	famFinish(t, c, ups[1], "cancelled")
	r, err := c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: edges[1].String(), Upstream: ups[1],
		Downstream: d, UpstreamOutcome: "cancelled", NowMs: famNow + 60})
	if err != nil || *r != (valkey.ResolveResult{Resolution: "already_fired"}) {
		t.Fatalf("late resolve = %+v %v", r, err)
	}
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"failed": "1", "group_state": "satisfied"})
	famWantFields(t, c, model.KeysFor(d).DepEdge(edges[1].String()), map[string]string{"state": "impossible"})
	famWantFields(t, c, model.KeysFor(d).Core(), map[string]string{"terminal_outcome": "none"})

	// Dispatcher drains after cancelling the siblings.
	if s, err := c.DrainSiblingCancelGroup(ctx, flow, d); err != nil || s != "drained" {
		t.Fatalf("drain = %s %v", s, err)
	}
	g := famHash(t, c, fk.EdgeGroup(d))
	if _, ok := g["cancel_siblings_pending_flag"]; ok || g["cancel_siblings_reason"] != "sibling_quorum_satisfied" {
		t.Fatalf("group after drain = %v", g)
	}
	if _, ok := g["cancel_siblings_pending_members"]; ok {
		t.Fatal("members not cleared")
	}
	if famIsMember(t, c, pk.PendingCancelGroups(), member) {
		t.Fatal("still pending")
	}
	famWantRaw(t, c, "ff_drain_sibling_cancel_group", []string{pk.PendingCancelGroups(), fk.EdgeGroup(d)},
		[]string{flow.String(), string(d)}, int64(1), "OK", "already_drained", "")
	if s, det, _ := c.ReconcileSiblingCancelGroup(ctx, flow, d); s != "no_op" || det != "not_in_set" {
		t.Fatalf("reconcile drained = %s %s", s, det)
	}

	// Reconciler dispositions on hand-made stale tuples.
	add := func(down model.ExecutionID) {
		c.Raw().Do(ctx, c.Raw().B().Sadd().Key(pk.PendingCancelGroups()).Member(flow.String()+"|"+string(down)).Build())
	}
	gone := c.Partitions().NewFlowExecutionID(flow)
	add(gone)
	if s, det, _ := c.ReconcileSiblingCancelGroup(ctx, flow, gone); s != "sremmed_stale" || det != "missing_edgegroup" {
		t.Fatalf("missing group = %s %s", s, det)
	}
	if s, _ := c.DrainSiblingCancelGroup(ctx, flow, gone); s != "already_drained" {
		t.Fatal("stale tuple not removed")
	}
	add(d)
	if s, det, _ := c.ReconcileSiblingCancelGroup(ctx, flow, d); s != "sremmed_stale" || det != "flag_cleared" {
		t.Fatalf("flag cleared = %s %s", s, det)
	}
	add(d)
	famHSet(t, c, fk.EdgeGroup(d), "cancel_siblings_pending_flag", "true",
		"cancel_siblings_pending_members", string(ups[1])+"|"+string(c.Partitions().NewFlowExecutionID(flow)))
	if s, det, _ := c.ReconcileSiblingCancelGroup(ctx, flow, d); s != "completed_drain" || det != "" {
		t.Fatalf("all terminal = %s %s", s, det)
	}
	if famIsMember(t, c, pk.PendingCancelGroups(), member) || famHash(t, c, fk.EdgeGroup(d))["cancel_siblings_pending_flag"] != "" {
		t.Fatal("completed_drain left state")
	}
	// Drain of a group whose hash is gone.
	add(gone)
	if s, _ := c.DrainSiblingCancelGroup(ctx, flow, gone); s != "drained_sans_group" {
		t.Fatalf("drain sans group = %s", s)
	}
	for _, fn := range []string{"ff_drain_sibling_cancel_group", "ff_reconcile_sibling_cancel_group"} {
		_, err := c.FCall(ctx, fn, []string{pk.PendingCancelGroups(), fk.EdgeGroup(d)}, []string{flow.String(), ""})
		famWantCode(t, err, valkey.CodeInvalidArgs)
	}
}

func TestQuorumGroups(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 20*time.Second)

	// quorum k=2 of 3, let_run: one success, then two failures → impossible
	// (failed > n−k): the child is skipped; let_run never enqueues.
	flow, fk, ups, d, edges := famSiblingsGroup(t, c, "quorum", "let_run", 2)
	pk := model.KeysOn(c.Partitions().FlowPartition(flow))
	resolve := func(i int, outcome string) *valkey.ResolveResult {
		t.Helper()
		r, err := c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow, EdgeID: edges[i].String(),
			Upstream: ups[i], Downstream: d, UpstreamOutcome: outcome, NowMs: famNow + int64(i)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := resolve(0, "success"); *r != (valkey.ResolveResult{Resolution: "pending"}) {
		t.Fatalf("1st = %+v", r)
	}
	if r := resolve(1, "skipped"); r.Resolution != "pending" {
		t.Fatalf("2nd = %+v", r)
	}
	famWantFields(t, c, fk.EdgeGroup(d), map[string]string{"succeeded": "1", "skipped": "1", "failed": "0"})
	if r := resolve(2, "expired"); *r != (valkey.ResolveResult{Resolution: "impossible", Effect: "child_skipped"}) {
		t.Fatalf("3rd = %+v", r)
	}
	g := famHash(t, c, fk.EdgeGroup(d))
	if g["group_state"] != "impossible" || g["failed"] != "1" || g["cancel_siblings_pending_flag"] != "" || g["satisfied_at"] != "" {
		t.Fatalf("group = %v", g)
	}
	if n := len(famMembers(t, c, pk.PendingCancelGroups())); n != 0 {
		t.Fatal("let_run enqueued a cancel group")
	}
	famWantFields(t, c, model.KeysFor(d).Core(), map[string]string{"terminal_outcome": "skipped"})

	// quorum k=2, cancel_remaining: two successes satisfy, the third
	// (still runnable) sibling is listed.
	flow2, fk2, ups2, d2, edges2 := famSiblingsGroup(t, c, "quorum", "cancel_remaining", 2)
	for i := 0; i < 2; i++ {
		famFinish(t, c, ups2[i], "success")
		r, err := c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow2, EdgeID: edges2[i].String(),
			Upstream: ups2[i], Downstream: d2, UpstreamOutcome: "success", NowMs: famNow})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"pending", "satisfied"}[i]; r.Resolution != want {
			t.Fatalf("resolve %d = %+v", i, r)
		}
	}
	famWantFields(t, c, fk2.EdgeGroup(d2), map[string]string{"group_state": "satisfied",
		"cancel_siblings_pending_members": string(ups2[2]), "cancel_siblings_reason": "sibling_quorum_satisfied"})
	famWantFields(t, c, model.KeysFor(d2).Core(), map[string]string{"eligibility_state": "eligible_now"})

	// any_of cancel_remaining where every upstream fails: impossible with
	// reason sibling_quorum_impossible and an empty member list.
	flow3, fk3, ups3, d3, edges3 := famSiblingsGroup(t, c, "any_of", "cancel_remaining", 0)
	pk3 := model.KeysOn(c.Partitions().FlowPartition(flow3))
	for i := range ups3 {
		famFinish(t, c, ups3[i], "failed")
	}
	var last *valkey.ResolveResult
	for i := range ups3 {
		var err error
		last, err = c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow3, EdgeID: edges3[i].String(),
			Upstream: ups3[i], Downstream: d3, UpstreamOutcome: "failed", NowMs: famNow})
		if err != nil {
			t.Fatal(err)
		}
	}
	if *last != (valkey.ResolveResult{Resolution: "impossible", Effect: "child_skipped"}) {
		t.Fatalf("any_of all failed = %+v", last)
	}
	famWantFields(t, c, fk3.EdgeGroup(d3), map[string]string{"group_state": "impossible", "failed": "3",
		"cancel_siblings_reason": "sibling_quorum_impossible", "cancel_siblings_pending_members": "",
		"cancel_siblings_pending_flag": "true"})
	if !famIsMember(t, c, pk3.PendingCancelGroups(), flow3.String()+"|"+string(d3)) {
		t.Fatal("impossible cancel_remaining group not enqueued")
	}

	// Counters beyond n → invariant_violation.
	flow4, fk4, ups4, d4, edges4 := famSiblingsGroup(t, c, "any_of", "let_run", 0)
	famHSet(t, c, fk4.EdgeGroup(d4), "failed", "3")
	_, err := c.ResolveDependency(ctx, &valkey.ResolveDependencyParams{Flow: flow4, EdgeID: edges4[0].String(),
		Upstream: ups4[0], Downstream: d4, UpstreamOutcome: "success", NowMs: famNow})
	var le *valkey.LuaError
	if !errors.As(err, &le) || le.Code != valkey.CodeInvariantViolation || le.Detail(0) != "edgegroup counters exceed n: 4/3" {
		t.Fatalf("invariant: %v", err)
	}
}

func TestPromoteBlockedToEligible(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	flow, _ := famFlow(t, c)
	a := famMember(t, c, flow, "default", 1)
	b := famMember(t, c, flow, "default", 2)
	ab := famEdge(t, c, flow, a, b, "")
	pk := model.KeysOn(b.Partition())
	bk := model.KeysFor(b)

	err := c.PromoteBlockedToEligible(ctx, b, famNow)
	var le *valkey.LuaError
	if !errors.As(err, &le) || le.Code != valkey.CodeDepsNotSatisfied || le.Detail(0) != "1" || le.Detail(1) != "1" {
		t.Fatalf("deps_not_satisfied: %v", err)
	}
	// Counter zero but the edge still unresolved.
	famHSet(t, c, bk.DepsMeta(), "unsatisfied_required_count", "0")
	err = c.PromoteBlockedToEligible(ctx, b, famNow)
	if !errors.As(err, &le) || le.Detail(0) != "0" || le.Detail(1) != "1" {
		t.Fatalf("unresolved set: %v", err)
	}
	c.Raw().Do(ctx, c.Raw().B().Srem().Key(bk.DepsUnresolved()).Member(ab.String()).Build())
	famHSet(t, c, bk.Core(), "attempt_state", "none")
	if err := c.PromoteBlockedToEligible(ctx, b, famNow+9); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, bk.Core(), map[string]string{"eligibility_state": "eligible_now", "attempt_state": "pending_first_attempt",
		"public_state": "waiting", "blocking_reason": "waiting_for_worker", "last_mutation_at": "1700000000009"})
	if _, ok := famScore(t, c, pk.LaneEligible("default"), string(b)); !ok {
		t.Fatal("not eligible")
	}
	if _, ok := famScore(t, c, pk.LaneBlockedDependencies("default"), string(b)); ok {
		t.Fatal("still blocked")
	}
	famWantCode(t, c.PromoteBlockedToEligible(ctx, b, famNow), valkey.CodeNotBlockedByDeps)
	famHSet(t, c, bk.Core(), "eligibility_state", "blocked_by_dependencies", "terminal_outcome", "skipped")
	famWantCode(t, c.PromoteBlockedToEligible(ctx, b, famNow), valkey.CodeTerminal)
	famHSet(t, c, bk.Core(), "lifecycle_phase", "active")
	famWantCode(t, c.PromoteBlockedToEligible(ctx, b, famNow), valkey.CodeNotRunnable)
	famWantCode(t, c.PromoteBlockedToEligible(ctx, c.Partitions().NewFlowExecutionID(flow), famNow), valkey.CodeExecutionNotFound)

	// evaluate_flow_eligibility statuses.
	for _, step := range []struct {
		status string
		fields []string
	}{
		{"owned", []string{"lifecycle_phase", "runnable", "ownership_state", "leased", "terminal_outcome", "none"}},
		{"terminal", []string{"ownership_state", "unowned", "terminal_outcome", "success"}},
		{"impossible", []string{"terminal_outcome", "none", "eligibility_state", "blocked_by_dependencies"}},
	} {
		status, fields := step.status, step.fields
		famHSet(t, c, bk.Core(), fields...)
		if status == "impossible" {
			famHSet(t, c, bk.DepsMeta(), "impossible_required_count", "1")
		}
		if got, err := c.EvaluateFlowEligibility(ctx, b); err != nil || got != status {
			t.Errorf("evaluate = %q %v, want %s", got, err, status)
		}
	}
	if got, _ := c.EvaluateFlowEligibility(ctx, c.Partitions().NewFlowExecutionID(flow)); got != "not_found" {
		t.Errorf("evaluate missing = %s", got)
	}
}

func TestReplayExecution(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)

	// Normal replay of a failed execution.
	e := c.Partitions().NewSoloExecutionID("default")
	famSeedExec(t, c, e, "default", 77, "priority", "2")
	pk := model.KeysOn(e.Partition())
	ek := model.KeysFor(e)
	famWantCode(t, func() error { _, err := c.ReplayExecution(ctx, e, famNow); return err }(), valkey.CodeExecutionNotTerminal)
	famFinish(t, c, e, "failed")
	c.Raw().Do(ctx, c.Raw().B().Zrem().Key(pk.LaneEligible("default")).Member(string(e)).Build())
	c.Raw().Do(ctx, c.Raw().B().Zadd().Key(pk.LaneTerminal("default")).ScoreMember().ScoreMember(5, string(e)).Build())
	before, _ := c.ServerTime(ctx)
	n, err := c.ReplayExecution(ctx, e, 1)
	if err != nil || n != 0 {
		t.Fatalf("replay = %d %v", n, err)
	}
	core := famHash(t, c, ek.Core())
	famWantFields(t, c, ek.Core(), map[string]string{
		"lifecycle_phase": "runnable", "ownership_state": "unowned", "eligibility_state": "eligible_now",
		"blocking_reason": "waiting_for_worker", "blocking_detail": "", "terminal_outcome": "none",
		"attempt_state": "pending_replay_attempt", "public_state": "waiting", "pending_replay_attempt": "1",
		"replay_count": "1", "completed_at": ""})
	if ts, _ := strconv.ParseInt(core["last_mutation_at"], 10, 64); ts < before || ts != mustInt(core["last_transition_at"]) {
		t.Fatalf("timestamps %v (ARGV now must be ignored)", core)
	}
	if _, ok := famScore(t, c, pk.LaneTerminal("default"), string(e)); ok {
		t.Fatal("still terminal-indexed")
	}
	if s, _ := famScore(t, c, pk.LaneEligible("default"), string(e)); s != 77-2e12 {
		t.Fatalf("eligible score %v", s)
	}
	hist, err := c.Raw().Do(ctx, c.Raw().B().Xrange().Key(ek.LeaseHistory()).Start("-").End("+").Build()).AsXRange()
	if err != nil || len(hist) != 1 || hist[0].FieldValues["event"] != "replay_initiated" ||
		hist[0].FieldValues["replay_type"] != "normal" || hist[0].FieldValues["replay_count"] != "1" ||
		hist[0].FieldValues["ts"] != core["last_mutation_at"] {
		t.Fatalf("history = %+v %v", hist, err)
	}

	// Replay limits: default 10; policy max_replay_count wins.
	famFinish(t, c, e, "success")
	famHSet(t, c, ek.Core(), "replay_count", "10")
	famWantCode(t, func() error { _, err := c.ReplayExecution(ctx, e, famNow); return err }(), valkey.CodeMaxReplaysExhausted)
	c.Raw().Do(ctx, c.Raw().B().Set().Key(ek.Policy()).Value(`{"max_replay_count":20}`).Build())
	if _, err := c.ReplayExecution(ctx, e, famNow); err != nil {
		t.Fatal(err)
	}
	famFinish(t, c, e, "success")
	c.Raw().Do(ctx, c.Raw().B().Set().Key(ek.Policy()).Value(`{"max_replay_count":11}`).Build())
	famWantCode(t, func() error { _, err := c.ReplayExecution(ctx, e, famNow); return err }(), valkey.CodeMaxReplaysExhausted)
	famWantCode(t, func() error {
		_, err := c.ReplayExecution(ctx, c.Partitions().NewSoloExecutionID("default"), famNow)
		return err
	}(), valkey.CodeExecutionNotFound)

	// Skipped flow member: impossible edges reset, blocked on deps again.
	flow, _ := famFlow(t, c)
	a := famMember(t, c, flow, "default", 1)
	b := famMember(t, c, flow, "default", 2)
	x := famMember(t, c, flow, "default", 3)
	d := famMember(t, c, flow, "default", 4)
	ad := famEdge(t, c, flow, a, d, "")
	bd := famEdge(t, c, flow, b, d, "")
	xd := famEdge(t, c, flow, x, d, "")
	famFinish(t, c, b, "success")
	if _, err := c.CascadeCompletion(ctx, flow, b, famNow); err != nil {
		t.Fatal(err)
	}
	famFinish(t, c, a, "failed")
	if _, err := c.CascadeCompletion(ctx, flow, a, famNow); err != nil {
		t.Fatal(err)
	}
	dk := model.KeysFor(d)
	famWantFields(t, c, dk.Core(), map[string]string{"terminal_outcome": "skipped"})
	n, err = c.ReplayExecution(ctx, d, famNow)
	if err != nil || n != 2 {
		t.Fatalf("replay skipped = %d %v", n, err)
	}
	famWantFields(t, c, dk.Core(), map[string]string{
		"lifecycle_phase": "runnable", "eligibility_state": "blocked_by_dependencies", "blocking_reason": "waiting_for_children",
		"blocking_detail": "2 dep(s) unsatisfied after replay", "terminal_outcome": "none",
		"attempt_state": "pending_replay_attempt", "public_state": "waiting_children", "replay_count": "1"})
	famWantFields(t, c, dk.DepEdge(ad.String()), map[string]string{"state": "unsatisfied", "last_resolved_at": ""})
	famWantFields(t, c, dk.DepEdge(bd.String()), map[string]string{"state": "satisfied"})
	famWantFields(t, c, dk.DepEdge(xd.String()), map[string]string{"state": "unsatisfied"})
	famWantFields(t, c, dk.DepsMeta(), map[string]string{"unsatisfied_required_count": "2", "impossible_required_count": "0"})
	un := famMembers(t, c, dk.DepsUnresolved())
	sort.Strings(un)
	want := []string{ad.String(), xd.String()}
	sort.Strings(want)
	if strings.Join(un, ",") != strings.Join(want, ",") {
		t.Fatalf("unresolved = %v", un)
	}
	dpk := model.KeysOn(d.Partition())
	if s, ok := famScore(t, c, dpk.LaneBlockedDependencies("default"), string(d)); !ok || s != 4 {
		t.Fatalf("blocked:deps %v %v", s, ok)
	}
	if _, ok := famScore(t, c, dpk.LaneTerminal("default"), string(d)); ok {
		t.Fatal("still terminal")
	}
	hist, _ = c.Raw().Do(ctx, c.Raw().B().Xrange().Key(dk.LeaseHistory()).Start("-").End("+").Build()).AsXRange()
	if len(hist) != 1 || hist[0].FieldValues["replay_type"] != "skipped_flow_member" {
		t.Fatalf("history %+v", hist)
	}
	// A skipped member replayed without its dep KEYS → invalid_input.
	famFinish(t, c, d, "skipped")
	_, err = c.FCall(ctx, "ff_replay_execution", []string{dk.Core(), "t", "e", dk.LeaseHistory()}, []string{string(d), "0", "edge"})
	famWantCode(t, err, valkey.CodeInvalidInput)
}

func mustInt(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

func TestCancelFlow(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	flow, fk := famFlow(t, c)
	pk := model.KeysOn(c.Partitions().FlowPartition(flow))
	a := famMember(t, c, flow, "default", 1)
	b := famMember(t, c, flow, "default", 2)
	keys := []string{fk.Core(), fk.Members(), pk.FlowIndex(), fk.PendingCancels(), pk.CancelBacklog()}
	for _, g := range []string{"-1", "1.5", "abc", "inf", "nan", "9007199254740992"} {
		_, err := c.FCall(ctx, "ff_cancel_flow", keys, []string{flow.String(), "r", "cancel_all", "0", g})
		famWantCode(t, err, valkey.CodeInvalidGraceMs)
	}
	famWantFields(t, c, fk.Core(), map[string]string{"public_flow_state": "open"})

	before, _ := c.ServerTime(ctx)
	res, err := c.CancelFlow(ctx, flow, "user asked", "cancel_all", 5000, 1)
	if err != nil || res.Policy != "cancel_all" || len(res.Members) != 2 {
		t.Fatalf("CancelFlow = %+v %v", res, err)
	}
	got := []string{string(res.Members[0]), string(res.Members[1])}
	sort.Strings(got)
	want := []string{string(a), string(b)}
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("members %v", got)
	}
	core := famHash(t, c, fk.Core())
	if core["public_flow_state"] != "cancelled" || core["cancel_reason"] != "user asked" ||
		core["cancellation_policy"] != "cancel_all" || mustInt(core["cancelled_at"]) < before || core["last_mutation_at"] != core["cancelled_at"] {
		t.Fatalf("flow core %v", core)
	}
	if s, ok := famScore(t, c, pk.CancelBacklog(), flow.String()); !ok || int64(s) != mustInt(core["cancelled_at"])+5000 {
		t.Fatalf("backlog %v %v", s, ok)
	}
	if len(famMembers(t, c, fk.PendingCancels())) != 2 {
		t.Fatal("pending_cancels")
	}
	// Members are not touched.
	famWantFields(t, c, model.KeysFor(a).Core(), map[string]string{"lifecycle_phase": "runnable"})
	famWantCode(t, func() error { _, err := c.CancelFlow(ctx, flow, "again", "cancel_all", -1, 0); return err }(), valkey.CodeFlowAlreadyTerminal)
	famWantCode(t, func() error { _, err := c.CancelFlow(ctx, model.NewUUID(), "x", "cancel_all", -1, 0); return err }(), valkey.CodeFlowNotFound)

	if err := c.AckCancelMember(ctx, flow, a); err != nil {
		t.Fatal(err)
	}
	if _, ok := famScore(t, c, pk.CancelBacklog(), flow.String()); !ok {
		t.Fatal("backlog dropped with a member still owed")
	}
	if err := c.AckCancelMember(ctx, flow, b); err != nil {
		t.Fatal(err)
	}
	if _, ok := famScore(t, c, pk.CancelBacklog(), flow.String()); ok || famExists(t, c, fk.PendingCancels()) {
		t.Fatal("backlog kept after the last ack")
	}
	famWantRaw(t, c, "ff_ack_cancel_member", []string{fk.PendingCancels(), pk.CancelBacklog()},
		[]string{string(a), flow.String()}, int64(1), "OK")

	// Other policies: no backlog; "" grace defaults to 30 s.
	flow2, fk2 := famFlow(t, c)
	famMember(t, c, flow2, "default", 1)
	pk2 := model.KeysOn(c.Partitions().FlowPartition(flow2))
	if res, err := c.CancelFlow(ctx, flow2, "r", "cancel_flow_only", -1, 0); err != nil || len(res.Members) != 1 {
		t.Fatalf("cancel_flow_only = %+v %v", res, err)
	}
	if famExists(t, c, fk2.PendingCancels()) {
		t.Fatal("backlog for cancel_flow_only")
	}
	if _, ok := famScore(t, c, pk2.CancelBacklog(), flow2.String()); ok {
		t.Fatal("backlog ZSET for cancel_flow_only")
	}
	flow3, fk3 := famFlow(t, c)
	famMember(t, c, flow3, "default", 1)
	pk3 := model.KeysOn(c.Partitions().FlowPartition(flow3))
	if _, err := c.CancelFlow(ctx, flow3, "r", "cancel_all", -1, 0); err != nil {
		t.Fatal(err)
	}
	if s, _ := famScore(t, c, pk3.CancelBacklog(), flow3.String()); int64(s) != mustInt(famHash(t, c, fk3.Core())["cancelled_at"])+30000 {
		t.Fatalf("default grace: %v", s)
	}
	// Empty flow under cancel_all: no backlog.
	flow4, fk4 := famFlow(t, c)
	pk4 := model.KeysOn(c.Partitions().FlowPartition(flow4))
	famWantRaw(t, c, "ff_cancel_flow", []string{fk4.Core(), fk4.Members(), pk4.FlowIndex(), fk4.PendingCancels(), pk4.CancelBacklog()},
		[]string{flow4.String(), "r", "cancel_all", "0", ""}, int64(1), "OK", "cancel_all")
	if _, ok := famScore(t, c, pk4.CancelBacklog(), flow4.String()); ok {
		t.Fatal("backlog for empty flow")
	}
}

func TestSetFlowTags(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	flow, fk := famFlow(t, c)
	famHSet(t, c, fk.Core(), "cairn.run", "r1", "cairn.session.id", "s1")
	n, err := c.SetFlowTags(ctx, flow, "app.owner", "me", "app.cost", "3")
	if err != nil || n != 2 {
		t.Fatalf("SetFlowTags = %d %v", n, err)
	}
	tags := famHash(t, c, fk.Tags())
	if len(tags) != 4 || tags["cairn.run"] != "r1" || tags["cairn.session.id"] != "s1" || tags["app.owner"] != "me" || tags["app.cost"] != "3" {
		t.Fatalf("tags = %v", tags)
	}
	core := famHash(t, c, fk.Core())
	if _, ok := core["cairn.run"]; ok || core["tags_migrated"] != "1" || core["flow_id"] != flow.String() {
		t.Fatalf("core after migration = %v", core)
	}
	// Migration runs once.
	famHSet(t, c, fk.Core(), "late.tag", "x")
	if _, err := c.SetFlowTags(ctx, flow, "app.owner", "you"); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, fk.Core(), map[string]string{"late.tag": "x"})
	famWantFields(t, c, fk.Tags(), map[string]string{"app.owner": "you"})

	for _, bad := range []string{"Upper.x", "nodot", "a.", "a..b", "9a.b", ".a"} {
		_, err := c.SetFlowTags(ctx, flow, "ok.k", "v", bad, "v")
		var le *valkey.LuaError
		if !errors.As(err, &le) || le.Code != valkey.CodeInvalidTagKey || le.Detail(0) != bad {
			t.Errorf("key %q: %v", bad, err)
		}
	}
	famWantFields(t, c, fk.Tags(), map[string]string{"ok.k": ""})
	_, err = c.SetFlowTags(ctx, flow, "a.b")
	famWantCode(t, err, valkey.CodeInvalidInput)
	_, err = c.SetFlowTags(ctx, flow)
	famWantCode(t, err, valkey.CodeInvalidInput)
	_, err = c.SetFlowTags(ctx, model.NewUUID(), "a.b", "c")
	famWantCode(t, err, valkey.CodeFlowNotFound)
}

// ApplyDependenciesToChild applies several staged edges of one child in
// one transaction: every dep edge exists and counts, a repeat is skipped,
// and an edge leading elsewhere is refused before anything is sent.
func TestApplyDependenciesToChild(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 10*time.Second)
	flow, _ := famFlow(t, c)
	a := famMember(t, c, flow, "default", 1)
	b := famMember(t, c, flow, "default", 2)
	d := famMember(t, c, flow, "lane-x", 3)
	var edges []*valkey.EdgeParams
	for _, up := range []model.ExecutionID{a, b} {
		p := &valkey.EdgeParams{Flow: flow, EdgeID: model.NewUUID(), Upstream: up, Downstream: d,
			GraphRevision: famRevision(t, c, flow), NowMs: famNow}
		rev, err := c.StageDependencyEdge(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		p.GraphRevision = rev
		edges = append(edges, p)
	}
	n, err := c.ApplyDependenciesToChild(ctx, d, edges)
	if err != nil || n != 2 {
		t.Fatalf("apply = %d %v", n, err)
	}
	dk := model.KeysFor(d)
	famWantFields(t, c, dk.DepsMeta(), map[string]string{"unsatisfied_required_count": "2"})
	famWantFields(t, c, dk.Core(), map[string]string{"eligibility_state": "blocked_by_dependencies"})
	for _, e := range edges {
		if !famIsMember(t, c, dk.DepsUnresolved(), e.EdgeID.String()) {
			t.Fatalf("edge %s not unresolved", e.EdgeID)
		}
	}
	if s, ok := famScore(t, c, model.KeysOn(d.Partition()).LaneBlockedDependencies("lane-x"), string(d)); !ok || s != 3 {
		t.Fatalf("blocked:dependencies score %v %v", s, ok)
	}
	// A repeat changes nothing.
	if _, err := c.ApplyDependenciesToChild(ctx, d, edges); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, dk.DepsMeta(), map[string]string{"unsatisfied_required_count": "2"})
	// An edge of another child is refused.
	if _, err := c.ApplyDependenciesToChild(ctx, b, edges); err == nil {
		t.Fatal("edges of another child applied")
	}
	// A held (delayed) child leaves lane:delayed in the same transaction
	// that blocks it on its dependencies.
	h := famMember(t, c, flow, "lane-x", 4)
	pk := model.KeysOn(h.Partition())
	raw := c.Raw()
	for _, cmd := range []vk.Completed{
		raw.B().Hset().Key(model.KeysFor(h).Core()).FieldValue().FieldValue("eligibility_state", "not_eligible_until_time").
			FieldValue("public_state", "delayed").FieldValue("delay_until", "99999999999999").Build(),
		raw.B().Zrem().Key(pk.LaneEligible("lane-x")).Member(string(h)).Build(),
		raw.B().Zadd().Key(pk.LaneDelayed("lane-x")).ScoreMember().ScoreMember(99999999999999, string(h)).Build(),
	} {
		if err := raw.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	held := &valkey.EdgeParams{Flow: flow, EdgeID: model.NewUUID(), Upstream: a, Downstream: h,
		GraphRevision: famRevision(t, c, flow), NowMs: famNow}
	rev, err := c.StageDependencyEdge(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	held.GraphRevision = rev
	if _, err := c.ApplyDependenciesToChild(ctx, h, []*valkey.EdgeParams{held}); err != nil {
		t.Fatal(err)
	}
	if _, ok := famScore(t, c, pk.LaneDelayed("lane-x"), string(h)); ok {
		t.Fatal("the held child is still in lane:delayed after its dependencies were applied")
	}
	if _, ok := famScore(t, c, pk.LaneBlockedDependencies("lane-x"), string(h)); !ok {
		t.Fatal("the held child is not in blocked:dependencies")
	}
	// A Lua error names the edge.
	ghost := c.Partitions().NewFlowExecutionID(flow)
	_, err = c.ApplyDependenciesToChild(ctx, ghost, []*valkey.EdgeParams{{Flow: flow, EdgeID: model.NewUUID(), Upstream: a, Downstream: ghost, NowMs: famNow}})
	famWantCode(t, err, valkey.CodeExecutionNotFound)
}
