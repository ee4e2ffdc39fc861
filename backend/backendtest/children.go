package backendtest

import (
	"context"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// childrenOperations are the backend.ChildrenDriver operations the suite
// exercises (appended to Operations).
var childrenOperations = []string{"WaitForChildren"}

func init() { Operations = append(Operations, childrenOperations...) }

// runChildren registers the WaitForChildren subtests.
func runChildren(sub func(name string, fn func(e *env))) {
	sub("WaitForChildren", testWaitForChildren)
	sub("WaitForChildren/Refused", testWaitForChildrenRefused)
}

// member creates a member of flow on the env's lane.
func (e *env) member(flow model.UUID) model.ExecutionID {
	p := e.spec()
	p.ExecutionID = e.d.Partitions().NewFlowExecutionID(flow)
	p.FlowID, p.FlowKind = flow, "bt-children"
	return e.create(p)
}

func (e *env) waitParams(c *backend.ClaimResult, flow model.UUID, children ...model.ExecutionID) *backend.WaitForChildrenParams {
	return &backend.WaitForChildrenParams{ExecutionID: c.ExecutionID, Fence: c.Fence,
		Holder: backend.Holder{LaneID: c.LaneID, WorkerInstanceID: "bt-worker-1"}, FlowID: flow, Children: children,
		NowMs: time.Now().UnixMilli()}
}

// testWaitForChildren: a member waiting for children it added releases
// its lease and is blocked (waiting_children, not claimable) while they
// have not ended; its old fence is gone.
func testWaitForChildren(e *env) {
	flow := model.NewUUID()
	e.member(flow)
	c := e.mustClaim()
	a, b := e.member(flow), e.member(flow)
	r, err := e.d.WaitForChildren(e.ctx, e.waitParams(c, flow, a, b))
	if err != nil {
		e.t.Fatal(err)
	}
	if r.Eligible {
		e.t.Fatalf("waiting for children that did not run: %+v", r)
	}
	st := e.state(c.ExecutionID)
	wantState(e.t, st, model.PhaseRunnable, model.PublicWaitingChildren)
	if st.EligibilityState != model.EligibleBlockedByDeps || st.OwnershipState == model.OwnershipLeased {
		e.t.Fatalf("state of the waiting member: %+v", st)
	}
	_, err = e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl})
	wantErr(e.t, "renew after waiting for children", err, backend.ErrLeaseGone)
	_, err = e.d.WaitForChildren(e.ctx, e.waitParams(c, flow, a))
	wantErr(e.t, "wait again with the old fence", err, backend.ErrLeaseGone)
	// The children are claimable, the waiting member is not.
	for range 2 {
		n := e.mustClaim()
		if n.ExecutionID != a && n.ExecutionID != b {
			e.t.Fatalf("claimed %s, want a child (%s or %s)", n.ExecutionID, a, b)
		}
	}
	if n := e.claimNext(); n != nil {
		e.t.Fatalf("claimed %s while it waits for its children", n.ExecutionID)
	}
}

// testWaitForChildrenRefused: malformed children, children outside the
// flow and a stale fence are refused and write nothing.
func testWaitForChildrenRefused(e *env) {
	flow := model.NewUUID()
	e.member(flow)
	c := e.mustClaim()
	kid := e.member(flow)
	other := e.spec() // not a member, maybe another partition
	stranger := e.create(other)
	cases := map[string]*backend.WaitForChildrenParams{
		"NoChildren":  e.waitParams(c, flow),
		"Itself":      e.waitParams(c, flow, c.ExecutionID),
		"Twice":       e.waitParams(c, flow, kid, kid),
		"ZeroFlow":    e.waitParams(c, model.UUID{}, kid),
		"Malformed":   e.waitParams(c, flow, "not-an-id"),
		"NotInFlow":   e.waitParams(c, flow, e.d.Partitions().NewFlowExecutionID(flow)),
		"OtherFlowOf": e.waitParams(c, model.NewUUID(), kid),
	}
	if stranger.Partition() == c.ExecutionID.Partition() {
		cases["Stranger"] = e.waitParams(c, flow, stranger)
	}
	for name, p := range cases {
		_, err := e.d.WaitForChildren(e.ctx, p)
		if name == "NotInFlow" || name == "OtherFlowOf" || name == "Stranger" {
			// Valkey's staging refuses these with its own codes.
			if err == nil {
				e.t.Fatalf("%s: accepted", name)
			}
			continue
		}
		wantErr(e.t, name, err, backend.ErrInvalidInput)
	}
	p := e.waitParams(c, flow, kid)
	p.Fence = stale(c.Fence)
	_, err := e.d.WaitForChildren(e.ctx, p)
	wantErr(e.t, "wait with a stale fence", err, backend.ErrLeaseGone)
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)
	if _, err := e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl}); err != nil {
		e.t.Fatalf("renew after refused waits: %v", err)
	}
	e.complete(c, nil)
}

// childrenUnmigrated are RunUnmigrated's cases of the ChildrenDriver
// operations.
func childrenUnmigrated(ctx context.Context, d backend.Driver, id model.ExecutionID, f backend.Fence) map[string]func() error {
	flow := model.NewUUID()
	child := d.Partitions().NewFlowExecutionID(flow)
	return map[string]func() error{
		"WaitForChildren": func() error {
			_, err := d.WaitForChildren(ctx, &backend.WaitForChildrenParams{ExecutionID: d.Partitions().NewFlowExecutionID(flow),
				Fence: f, FlowID: flow, Children: []model.ExecutionID{child}})
			return err
		},
	}
}
