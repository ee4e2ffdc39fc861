package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
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

// errFlowPartitions reports a backend client routing flows with another
// partition count than the deployment's.
func (c *Client) checkFlowRouting() error {
	if c.vc == nil {
		return nil // the Postgres client is the partition config (c.parts)
	}
	if c.vc.Partitions().Flow != c.parts.Flow {
		return fmt.Errorf("sdk: backend client routes flows over %d partitions but ff:config:partitions says %d; dial it with the deployment's PartitionConfig",
			c.vc.Partitions().Flow, c.parts.Flow)
	}
	return nil
}

// CreateFlow creates an empty flow (ff_create_flow) of the given kind.
func (c *Client) CreateFlow(ctx context.Context, kind string) (*Flow, error) {
	if err := c.checkFlowRouting(); err != nil {
		return nil, err
	}
	id := model.NewUUID()
	if c.pg != nil {
		if err := c.pg.CreateFlow(ctx, &postgres.CreateFlowParams{FlowID: id, Kind: kind, Namespace: c.ns, NowMs: c.clock().UnixMilli()}); err != nil {
			return nil, fmt.Errorf("sdk: %w", err)
		}
		return &Flow{ID: id, c: c}, nil
	}
	if _, err := c.vc.CreateFlow(ctx, id, kind, c.ns, c.clock().UnixMilli()); err != nil {
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
	CancelRemaining SiblingPolicy = valkey.OnSatisfiedCancelRemain
	// LetRun lets them finish; their outcomes no longer matter to the
	// child.
	LetRun SiblingPolicy = valkey.OnSatisfiedLetRun
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
func AllOf() Join { return Join{variant: valkey.EdgeGroupAllOf} }

// AnyOf runs the child after the first parent that succeeds; siblings
// says what becomes of the others.
func AnyOf(siblings SiblingPolicy) Join {
	return Join{variant: valkey.EdgeGroupAnyOf, siblings: siblings}
}

// Quorum runs the child once k parents succeeded; siblings says what
// becomes of the others.
func Quorum(k int, siblings SiblingPolicy) Join {
	return Join{variant: valkey.EdgeGroupQuorum, k: k, siblings: siblings}
}

func (j Join) validate(parents int) error {
	switch j.variant {
	case valkey.EdgeGroupAllOf:
		return nil
	case valkey.EdgeGroupAnyOf, valkey.EdgeGroupQuorum:
	default:
		return invalid("join", "use AllOf, AnyOf or Quorum (got the zero Join)")
	}
	if j.siblings != CancelRemaining && j.siblings != LetRun {
		return invalid("join.siblings", "want CancelRemaining or LetRun (got %q)", j.siblings)
	}
	if parents == 0 {
		return invalid("join", "%s needs at least one parent", j.variant)
	}
	if j.variant == valkey.EdgeGroupQuorum && (j.k < 1 || j.k > parents) {
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
	now := f.c.clock().UnixMilli()
	if f.c.pg != nil {
		// One transaction: edges, edge group and the child's state, with
		// the parents that already finished counted.
		_, err := f.c.pg.AddFlowMember(ctx, &postgres.AddFlowMemberParams{FlowID: f.ID, Child: id, Parents: after,
			Kind: join.variant, K: join.k, OnSatisfied: string(join.siblings), NowMs: now})
		if err != nil {
			return id, fmt.Errorf("sdk: %w", err)
		}
		return id, nil
	}
	if _, _, err := f.c.vc.AddExecutionToFlow(ctx, f.ID, id, now); err != nil {
		return id, fmt.Errorf("sdk: %w", err)
	}
	if len(after) == 0 {
		return id, nil
	}
	if join.variant != valkey.EdgeGroupAllOf {
		if _, err := f.c.vc.SetEdgeGroupPolicy(ctx, f.ID, id, join.variant, string(join.siblings), join.k, now); err != nil {
			return id, fmt.Errorf("sdk: %w", err)
		}
	}
	edges := make([]*valkey.EdgeParams, len(after))
	for i, parent := range after {
		if edges[i], err = f.stage(ctx, parent, id); err != nil {
			return id, err
		}
	}
	if _, err := f.c.vc.ApplyDependenciesToChild(ctx, id, edges); err != nil {
		return id, fmt.Errorf("sdk: %w", err)
	}
	for _, e := range edges {
		if err := f.resolveFinished(ctx, e); err != nil {
			return id, err
		}
	}
	return id, nil
}

// stage stages parent → child on the flow at the current graph revision
// (retrying on stale_graph_revision) and returns the edge, carrying the
// revision it was staged at, ready to apply.
func (f *Flow) stage(ctx context.Context, parent, child model.ExecutionID) (*valkey.EdgeParams, error) {
	ep := &valkey.EdgeParams{Flow: f.ID, EdgeID: model.NewUUID(), Upstream: parent, Downstream: child}
	if err := f.c.vc.StageEdge(ctx, ep, func() int64 { return f.c.clock().UnixMilli() }); err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return ep, nil
}

// resolveFinished resolves an applied edge whose parent is already
// terminal (valkey.Client.ResolveIfFinished).
func (f *Flow) resolveFinished(ctx context.Context, ep *valkey.EdgeParams) error {
	if err := f.c.vc.ResolveIfFinished(ctx, ep, f.c.clock().UnixMilli()); err != nil {
		return fmt.Errorf("sdk: %w", err)
	}
	return nil
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
	if err := c.checkFlowRouting(); err != nil {
		return err
	}
	if _, err := c.drv.CancelFlow(ctx, &backend.CancelFlowParams{FlowID: flow, Reason: reason}); err != nil {
		return fmt.Errorf("sdk: cancel flow %s: %w", flow, err)
	}
	return nil
}
