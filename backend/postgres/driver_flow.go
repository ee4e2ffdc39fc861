package postgres

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
)

// CreateFlow implements backend.FlowDriver (Client.CreateFlow).
func (d *Driver) CreateFlow(ctx context.Context, p *backend.CreateFlowParams) error {
	return mapControlErr(d.c.CreateFlow(ctx, p), false)
}

// AddFlowMember implements backend.FlowDriver (Client.AddFlowMember: the
// edges, the edge group and the child's state in one transaction).
func (d *Driver) AddFlowMember(ctx context.Context, p *backend.AddFlowMemberParams) error {
	if p.FlowID.IsZero() {
		return fmt.Errorf("%w: add flow member %s: a flow id is required", backend.ErrInvalidInput, p.Child)
	}
	_, err := d.c.AddFlowMember(ctx, p)
	return mapControlErr(err, false)
}
