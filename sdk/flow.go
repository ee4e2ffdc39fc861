package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/edgegroup"
)

// dependentHold is how long a flow member with parents is created
// delayed, so no worker claims it in the gap before its dependency edges
// are applied (applying flips it to blocked_by_dependencies, and
// satisfaction makes it eligible; the stale delayed entry is dropped by
// the promoter). See Flow.Add.
const dependentHold = 24 * time.Hour

// Flow is a DAG of executions sharing one partition. Create it with
// Client.CreateFlow. Its methods are safe for concurrent use, but edges
// are staged under optimistic concurrency: concurrent builders retry.
type Flow struct {
	// ID is the flow id.
	ID model.UUID
	c  *Client
}

// CreateFlow creates an empty flow (ff_create_flow) of the given kind.
func (c *Client) CreateFlow(ctx context.Context, kind string) (*Flow, error) {
	id := model.NewUUID()
	if err := c.drv.CreateFlow(ctx, &backend.CreateFlowParams{FlowID: id, Kind: kind, Namespace: c.ns,
		NowMs: c.clock().UnixMilli()}); err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return &Flow{ID: id, c: c}, nil
}

// Add creates an execution as a member of the flow that runs only after
// every execution in after completed successfully (FlowFabric's
// success_only all-of edges); a failed parent skips it. spec.ID must be
// empty: the id is minted on the flow's partition.
//
// A member with parents is created delayed and then blocked by its
// dependencies, so no worker can claim it before its edges exist. Its
// edges are staged one by one, then applied to it together in one
// transaction, and only then are parents that already finished resolved:
// a child is never runnable while one of its edges is missing, whichever
// of its parents finish while Add runs.
func (f *Flow) Add(ctx context.Context, spec ExecutionSpec, after ...model.ExecutionID) (model.ExecutionID, error) {
	return f.AddJoin(ctx, spec, AllOf(), after...)
}

// SiblingPolicy says what happens to the parents still running when an
// AnyOf or Quorum join is satisfied.
type SiblingPolicy string

const (
	// CancelRemaining cancels the parents that have not finished once the
	// join is satisfied (reason sibling_quorum_satisfied; the host's
	// edge_cancel dispatcher carries it out).
	CancelRemaining SiblingPolicy = backend.OnSatisfiedCancelRemaining
	// LetRun lets them finish; their outcomes no longer matter to the
	// child.
	LetRun SiblingPolicy = backend.OnSatisfiedLetRun
)

// Join is how a flow member's parents gate it: AllOf (every parent
// succeeds; a failed parent skips the child), AnyOf (the first success
// runs it), Quorum (k successes run it; once k can no longer be reached
// the child is skipped).
type Join struct {
	variant  string
	k        int
	siblings SiblingPolicy
}

// AllOf is the default join: every parent must succeed.
func AllOf() Join { return Join{variant: edgegroup.KindAllOf} }

// AnyOf runs the child after the first parent that succeeds; siblings
// says what becomes of the others.
func AnyOf(siblings SiblingPolicy) Join {
	return Join{variant: edgegroup.KindAnyOf, siblings: siblings}
}

// Quorum runs the child once k parents succeeded; siblings says what
// becomes of the others.
func Quorum(k int, siblings SiblingPolicy) Join {
	return Join{variant: edgegroup.KindQuorum, k: k, siblings: siblings}
}

func (j Join) validate(parents int) error {
	switch j.variant {
	case edgegroup.KindAllOf:
		return nil
	case edgegroup.KindAnyOf, edgegroup.KindQuorum:
	default:
		return invalid("join", "use AllOf, AnyOf or Quorum (got the zero Join)")
	}
	if j.siblings != CancelRemaining && j.siblings != LetRun {
		return invalid("join.siblings", "want CancelRemaining or LetRun (got %q)", j.siblings)
	}
	if parents == 0 {
		return invalid("join", "%s needs at least one parent", j.variant)
	}
	if j.variant == edgegroup.KindQuorum && (j.k < 1 || j.k > parents) {
		return invalid("join.k", "quorum %d is out of range 1..%d (the number of parents)", j.k, parents)
	}
	return nil
}

// AddJoin is Add with a join other than AllOf: the child's inbound edge
// group gets join's policy (ff_set_edge_group_policy) before its first
// edge is applied.
//
//	winner, _ := flow.AddJoin(ctx, spec, sdk.AnyOf(sdk.CancelRemaining), mirrorA, mirrorB, mirrorC)
//	commit, _ := flow.AddJoin(ctx, spec, sdk.Quorum(2, sdk.LetRun), replica1, replica2, replica3)
//
// Workers that complete parents must resolve their edges: run them with
// WorkerConfig.ResolveDependencies or run the host's dependency
// dispatcher.
func (f *Flow) AddJoin(ctx context.Context, spec ExecutionSpec, join Join, after ...model.ExecutionID) (model.ExecutionID, error) {
	if err := join.validate(len(after)); err != nil {
		return "", err
	}
	if spec.ID != "" {
		return "", invalid("id", "flow members are minted on the flow's partition; leave ID empty")
	}
	if (spec.Delay > 0 || !spec.RunAt.IsZero()) && len(after) > 0 {
		return "", invalid("delay", "a member with parents cannot also be delayed")
	}
	p := f.c.parts.FlowPartition(f.ID)
	for _, a := range after {
		if _, err := model.ParseExecutionID(string(a)); err != nil || a.Partition() != p {
			return "", invalid("after", "%s is not an execution of flow %s", a, f.ID)
		}
	}
	spec.ID = f.c.parts.NewFlowExecutionID(f.ID)
	if len(after) > 0 {
		spec.Delay = dependentHold
	}
	id, err := f.c.CreateExecution(ctx, spec)
	if err != nil {
		return "", err
	}
	// The driver applies the edges and the edge group so that the child
	// is never runnable while one is missing (backend.FlowDriver).
	if err := f.c.drv.AddFlowMember(ctx, &backend.AddFlowMemberParams{FlowID: f.ID, Child: id, Parents: after,
		Kind: join.variant, K: join.k, OnSatisfied: string(join.siblings), NowMs: f.c.clock().UnixMilli()}); err != nil {
		// The execution exists but is no member: cancel it, so it neither
		// runs outside its flow nor waits forever in its creation hold.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if cerr := f.c.CancelExecution(cctx, id, "flow_member_add_failed"); cerr != nil {
			return id, fmt.Errorf("sdk: add %s to flow %s: %w (and cancelling it failed: %v)", id, f.ID, err, cerr)
		}
		return id, fmt.Errorf("sdk: add %s to flow %s (cancelled): %w", id, f.ID, err)
	}
	return id, nil
}

// CancelFlow cancels a flow and every member that is not terminal yet
// (ff_cancel_flow with cancel_all, then ff_cancel_execution per member
// and ff_ack_cancel_member, as FlowFabric's server does synchronously; on
// Postgres the flow and its members in one transaction). A missing flow
// is an error matching backend.ErrFlowNotFound, a cancelled one
// backend.ErrFlowTerminal.
func (c *Client) CancelFlow(ctx context.Context, flow model.UUID, reason string) error {
	if flow.IsZero() {
		return invalid("flow", "a flow id is required")
	}
	if _, err := c.drv.CancelFlow(ctx, &backend.CancelFlowParams{FlowID: flow, Reason: reason}); err != nil {
		return fmt.Errorf("sdk: cancel flow %s: %w", flow, err)
	}
	return nil
}
