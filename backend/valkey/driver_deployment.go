package valkey

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// ReadDeployment implements backend.DeploymentDriver: ff:config:partitions
// (the defaults, Found false, when absent), as workers read it.
func (d *Driver) ReadDeployment(ctx context.Context) (*backend.Deployment, error) {
	parts, found, err := d.c.ReadPartitionConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("read deployment: %w", err)
	}
	return &backend.Deployment{Partitions: parts, Found: found}, nil
}

// BindPartitions implements backend.DeploymentDriver (WithPartitions).
func (d *Driver) BindPartitions(parts model.PartitionConfig) backend.Driver {
	return d.WithPartitions(parts)
}
