package valkey

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// StageEdge stages ep (parent → child on ep.Flow) at the flow's current
// graph revision, retrying on stale_graph_revision, with NowMs from now;
// ep.GraphRevision is then the revision it was staged at, ready for
// ApplyDependenciesToChild.
func (c *Client) StageEdge(ctx context.Context, ep *EdgeParams, now func() int64) error {
	core := c.flowKeys(ep.Flow).Core()
	for try := 0; ; try++ {
		rev, err := c.c.Do(ctx, c.c.B().Hget().Key(core).Field("graph_revision").Build()).AsInt64()
		if err != nil {
			return fmt.Errorf("read graph revision of flow %s: %w", ep.Flow, err)
		}
		ep.GraphRevision, ep.NowMs = rev, now()
		newRev, err := c.StageDependencyEdge(ctx, ep)
		if CodeOf(err) == "stale_graph_revision" && try < 10 {
			continue
		}
		if err != nil {
			return err
		}
		ep.GraphRevision = newRev
		return nil
	}
}

// ResolveIfFinished resolves an applied edge whose upstream already
// ended: its completion was handled before the edge existed and resolved
// nothing (the engine's dependency reconciler would repair it only on its
// next sweep). Resolution is idempotent, so racing the dispatcher is
// harmless.
func (c *Client) ResolveIfFinished(ctx context.Context, ep *EdgeParams, nowMs int64) error {
	f, err := c.famCoreFields(ctx, ep.Upstream, "lifecycle_phase", "terminal_outcome")
	if err != nil {
		return err
	}
	if f[0] != model.PhaseTerminal {
		return nil
	}
	_, err = c.ResolveDependency(ctx, &ResolveDependencyParams{Flow: ep.Flow, EdgeID: ep.EdgeID.String(),
		Upstream: ep.Upstream, Downstream: ep.Downstream, UpstreamOutcome: f[1], NowMs: nowMs})
	return err
}

// WaitForChildren implements backend.ChildrenDriver as FlowFabric's SDK
// does: ff_stage_dependency_edge per child (child → execution) and
// ff_apply_dependency_to_child, ff_move_to_waiting_children (fenced),
// then ff_resolve_dependency for each child that already ended and, when
// nothing is left to wait for, ff_promote_blocked_to_eligible.
func (d *Driver) WaitForChildren(ctx context.Context, p *backend.WaitForChildrenParams) (*backend.WaitForChildrenResult, error) {
	if err := p.ValidateChildren(); err != nil {
		return nil, err
	}
	now := func() int64 { return p.NowMs }
	edges := make([]*EdgeParams, len(p.Children))
	for i, ch := range p.Children {
		edges[i] = &EdgeParams{Flow: p.FlowID, EdgeID: model.NewUUID(), Upstream: ch, Downstream: p.ExecutionID}
		if err := d.c.StageEdge(ctx, edges[i], now); err != nil {
			return nil, mapControlErr(err, false)
		}
	}
	if _, err := d.c.ApplyDependenciesToChild(ctx, p.ExecutionID, edges); err != nil {
		return nil, mapControlErr(err, false)
	}
	if err := d.c.MoveToWaitingChildren(ctx, &MoveToWaitingChildrenParams{ExecutionID: p.ExecutionID, Fence: p.Fence}); err != nil {
		return nil, mapControlErr(err, true)
	}
	// The lease is gone: the rest must not be cut short by the holder's
	// context ending with it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, e := range edges {
		if err := d.c.ResolveIfFinished(ctx, e, p.NowMs); err != nil {
			return nil, mapControlErr(err, false)
		}
	}
	st, err := d.c.EvaluateFlowEligibility(ctx, p.ExecutionID)
	if err != nil {
		return nil, mapControlErr(err, false)
	}
	res := &backend.WaitForChildrenResult{}
	if st == "eligible" {
		// Already eligible (a dependency resolver promoted it after the
		// resolve above: not_blocked_by_deps), or already claimed again
		// by another of the worker's slots (not_runnable): either way
		// the wait is over.
		err := d.c.PromoteBlockedToEligible(ctx, p.ExecutionID, p.NowMs)
		if err != nil && CodeOf(err) != "not_blocked_by_deps" && CodeOf(err) != "not_runnable" {
			return nil, mapControlErr(err, false)
		}
		res.Eligible = true
	}
	return res, nil
}
