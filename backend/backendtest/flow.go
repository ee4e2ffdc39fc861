package backendtest

import (
	"context"
	"slices"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/edgegroup"
)

// flowOperations are the backend.FlowDriver operations the suite
// exercises (appended to Operations).
var flowOperations = []string{"CreateFlow", "AddFlowMember"}

func init() { Operations = append(Operations, flowOperations...) }

// runFlows registers the FlowDriver subtests.
func runFlows(sub func(name string, fn func(e *env))) {
	sub("CreateFlow", testCreateFlow)
	sub("AddFlowMember/Root", testAddFlowMemberRoot)
	sub("AddFlowMember/Blocked", testAddFlowMemberBlocked)
	sub("AddFlowMember/InvalidInput", testAddFlowMemberInvalid)
}

// newFlow creates a flow of its own.
func (e *env) newFlow() model.UUID {
	e.t.Helper()
	flow := model.NewUUID()
	if err := e.d.CreateFlow(e.ctx, &backend.CreateFlowParams{FlowID: flow, Kind: "bt-flow", Namespace: "bt",
		NowMs: time.Now().UnixMilli()}); err != nil {
		e.t.Fatalf("create flow %s: %v", flow, err)
	}
	return flow
}

// onFlow creates an execution on flow's partition (not yet a member),
// delayed by an hour when delayed.
func (e *env) onFlow(flow model.UUID, delayed bool) model.ExecutionID {
	p := e.spec()
	p.ExecutionID = e.d.Partitions().NewFlowExecutionID(flow)
	if delayed {
		p.DelayUntil = time.Now().Add(time.Hour).UnixMilli()
	}
	return e.create(p)
}

func (e *env) addMember(flow model.UUID, child model.ExecutionID, kind string, k int, parents ...model.ExecutionID) error {
	return e.d.AddFlowMember(e.ctx, &backend.AddFlowMemberParams{FlowID: flow, Child: child, Parents: parents,
		Kind: kind, K: k, OnSatisfied: backend.OnSatisfiedLetRun, NowMs: time.Now().UnixMilli()})
}

// testCreateFlow: a created flow exists (cancelling it finds it), a
// repeat changes nothing, a zero id is refused.
func testCreateFlow(e *env) {
	flow := e.newFlow()
	if err := e.d.CreateFlow(e.ctx, &backend.CreateFlowParams{FlowID: flow, Kind: "other", Namespace: "bt"}); err != nil {
		e.t.Fatalf("create flow %s again: %v", flow, err)
	}
	err := e.d.CreateFlow(e.ctx, &backend.CreateFlowParams{Kind: "bt-flow", Namespace: "bt"})
	wantErr(e.t, "create a flow without an id", err, backend.ErrInvalidInput)
	r, err := e.d.CancelFlow(e.ctx, &backend.CancelFlowParams{FlowID: flow, Reason: "bt"})
	if err != nil {
		e.t.Fatalf("cancel the created flow: %v", err)
	}
	if len(r.Members) != 0 {
		e.t.Fatalf("an empty flow's cancel ended %v", r.Members)
	}
	_, err = e.d.CancelFlow(e.ctx, &backend.CancelFlowParams{FlowID: model.NewUUID(), Reason: "bt"})
	wantErr(e.t, "cancel a flow never created", err, backend.ErrFlowNotFound)
}

// testAddFlowMemberRoot: a member without parents joins the flow and
// stays as it was created, claimable; cancelling the flow ends it.
func testAddFlowMemberRoot(e *env) {
	flow := e.newFlow()
	id := e.onFlow(flow, false)
	if err := e.addMember(flow, id, "", 0); err != nil {
		e.t.Fatal(err)
	}
	st := e.state(id)
	wantState(e.t, st, model.PhaseRunnable, model.PublicWaiting)
	if st.FlowID != flow.String() || st.EligibilityState != model.EligibleNow {
		e.t.Fatalf("state of a root member: %+v", st)
	}
	r, err := e.d.CancelFlow(e.ctx, &backend.CancelFlowParams{FlowID: flow, Reason: "bt"})
	if err != nil {
		e.t.Fatal(err)
	}
	if !slices.Equal(r.Members, []model.ExecutionID{id}) {
		e.t.Fatalf("cancel flow ended %v, want [%s]", r.Members, id)
	}
	wantState(e.t, e.state(id), model.PhaseTerminal, model.PublicCancelled)
}

// testAddFlowMemberBlocked: a child whose parents have not finished is
// blocked by its dependencies under every join kind (not claimable, not
// offered by ClaimNext), while its parents stay claimable.
func testAddFlowMemberBlocked(e *env) {
	flow := e.newFlow()
	a, b := e.onFlow(flow, false), e.onFlow(flow, false)
	for _, p := range []model.ExecutionID{a, b} {
		if err := e.addMember(flow, p, "", 0); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, j := range []struct {
		kind string
		k    int
	}{{edgegroup.KindAllOf, 0}, {edgegroup.KindAnyOf, 0}, {edgegroup.KindQuorum, 1}} {
		child := e.onFlow(flow, true)
		if err := e.addMember(flow, child, j.kind, j.k, a, b); err != nil {
			e.t.Fatalf("add a %s child: %v", j.kind, err)
		}
		st := e.state(child)
		if st.LifecyclePhase != model.PhaseRunnable || st.EligibilityState != model.EligibleBlockedByDeps ||
			st.FlowID != flow.String() {
			e.t.Fatalf("state of a %s child of running parents: %+v", j.kind, st)
		}
		_, err := e.d.ClaimExecution(e.ctx, &backend.ClaimExecutionParams{ExecutionID: child, WorkerID: "bt-worker",
			WorkerInstanceID: "bt-worker-1", LeaseTTLMs: ttl})
		wantErr(e.t, "claim a blocked child", err, backend.ErrNotClaimable)
	}
	seen := map[model.ExecutionID]bool{}
	for range 2 {
		c := e.mustClaim()
		seen[c.ExecutionID] = true
	}
	if !seen[a] || !seen[b] {
		e.t.Fatalf("claimed %v, want the parents %s and %s", seen, a, b)
	}
	if c := e.claimNext(); c != nil {
		e.t.Fatalf("claimed blocked child %s", c.ExecutionID)
	}
}

// testAddFlowMemberInvalid: a zero flow, a child or parent off the
// flow's partition and an unknown join kind are refused, and the child
// is left as it was.
func testAddFlowMemberInvalid(e *env) {
	flow := e.newFlow()
	parent := e.onFlow(flow, false)
	child := e.onFlow(flow, true)
	var other model.UUID
	for other = model.NewUUID(); e.d.Partitions().FlowPartition(other) == e.d.Partitions().FlowPartition(flow); other = model.NewUUID() {
	}
	off := e.onFlow(other, false)
	wantErr(e.t, "add to a zero flow", e.addMember(model.UUID{}, child, "", 0, parent), backend.ErrInvalidInput)
	wantErr(e.t, "add a child off the flow's partition", e.addMember(flow, off, "", 0), backend.ErrInvalidInput)
	wantErr(e.t, "add a parent off the flow's partition", e.addMember(flow, child, "", 0, off), backend.ErrInvalidInput)
	wantErr(e.t, "add with an unknown join", e.addMember(flow, child, "most_of", 1, parent), backend.ErrInvalidInput)
	st := e.state(child)
	wantState(e.t, st, model.PhaseRunnable, model.PublicDelayed)
	if st.FlowID != "" {
		e.t.Fatalf("a refused add made %s a member: %+v", child, st)
	}
}

// flowUnmigrated are RunUnmigrated's cases of the FlowDriver operations.
func flowUnmigrated(ctx context.Context, d backend.Driver) map[string]func() error {
	flow := model.NewUUID()
	return map[string]func() error{
		"CreateFlow": func() error {
			return d.CreateFlow(ctx, &backend.CreateFlowParams{FlowID: flow, Kind: "k", Namespace: "bt"})
		},
		"AddFlowMember": func() error {
			return d.AddFlowMember(ctx, &backend.AddFlowMemberParams{FlowID: flow,
				Child: d.Partitions().NewFlowExecutionID(flow)})
		},
	}
}
