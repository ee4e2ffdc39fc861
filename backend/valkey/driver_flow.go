package valkey

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/edgegroup"
)

// checkFlowRouting refuses flow operations when the client routes flows
// over another partition count than the driver's (the deployment's, read
// from ff:config:partitions): the flow's keys and its members' ids would
// disagree.
func (d *Driver) checkFlowRouting() error {
	if d.c.Partitions().Flow != d.parts.Flow {
		return fmt.Errorf("%w: the backend client routes flows over %d partitions but ff:config:partitions says %d; dial it with the deployment's PartitionConfig",
			backend.ErrInvalidInput, d.c.Partitions().Flow, d.parts.Flow)
	}
	return nil
}

// CreateFlow implements backend.FlowDriver (ff_create_flow).
func (d *Driver) CreateFlow(ctx context.Context, p *backend.CreateFlowParams) error {
	if p.FlowID.IsZero() {
		return fmt.Errorf("%w: create flow: a flow id is required", backend.ErrInvalidInput)
	}
	if err := d.checkFlowRouting(); err != nil {
		return err
	}
	if _, err := d.c.CreateFlow(ctx, p.FlowID, p.Kind, p.Namespace, p.NowMs); err != nil {
		return mapControlErr(err, false)
	}
	return nil
}

// validMember checks what AddFlowMember's calls would only find out
// after the child joined the flow.
func (d *Driver) validMember(p *backend.AddFlowMemberParams) error {
	if p.FlowID.IsZero() {
		return fmt.Errorf("%w: add flow member %s: a flow id is required", backend.ErrInvalidInput, p.Child)
	}
	fp := d.parts.FlowPartition(p.FlowID)
	for _, id := range append([]model.ExecutionID{p.Child}, p.Parents...) {
		if _, err := model.ParseExecutionID(string(id)); err != nil || id.Partition() != fp {
			return fmt.Errorf("%w: add flow member %s: %s is not on flow %s's partition", backend.ErrInvalidInput, p.Child, id, p.FlowID)
		}
	}
	switch p.Kind {
	case "", edgegroup.KindAllOf, edgegroup.KindAnyOf, edgegroup.KindQuorum:
		return nil
	}
	return fmt.Errorf("%w: add flow member %s: edge group kind %q", backend.ErrInvalidInput, p.Child, p.Kind)
}

// AddFlowMember implements backend.FlowDriver as FlowFabric's SDK does:
// ff_add_execution_to_flow, ff_set_edge_group_policy (any_of, quorum),
// ff_stage_dependency_edge per parent at the current graph revision,
// ff_apply_dependency_to_child with every edge at once, and only then
// ff_resolve_dependency for the parents that already ended, so the child
// is never runnable while one of its edges is missing.
func (d *Driver) AddFlowMember(ctx context.Context, p *backend.AddFlowMemberParams) error {
	if err := d.validMember(p); err != nil {
		return err
	}
	if err := d.checkFlowRouting(); err != nil {
		return err
	}
	if _, _, err := d.c.AddExecutionToFlow(ctx, p.FlowID, p.Child, p.NowMs); err != nil {
		return mapControlErr(err, false)
	}
	if len(p.Parents) == 0 {
		return nil
	}
	if p.Kind != "" && p.Kind != edgegroup.KindAllOf {
		if _, err := d.c.SetEdgeGroupPolicy(ctx, p.FlowID, p.Child, p.Kind, p.OnSatisfied, p.K, p.NowMs); err != nil {
			return mapControlErr(err, false)
		}
	}
	now := func() int64 { return p.NowMs }
	edges := make([]*EdgeParams, len(p.Parents))
	for i, parent := range p.Parents {
		edges[i] = &EdgeParams{Flow: p.FlowID, EdgeID: model.NewUUID(), Upstream: parent, Downstream: p.Child}
		if err := d.c.StageEdge(ctx, edges[i], now); err != nil {
			return mapControlErr(err, false)
		}
	}
	if _, err := d.c.ApplyDependenciesToChild(ctx, p.Child, edges); err != nil {
		return mapControlErr(err, false)
	}
	for _, e := range edges {
		if err := d.c.ResolveIfFinished(ctx, e, p.NowMs); err != nil {
			return mapControlErr(err, false)
		}
	}
	return nil
}
