package postgres

import (
	"context"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// ReadDeployment implements backend.DeploymentDriver: CheckSchema
// (backend.ErrNotMigrated before `fabric migrate`), then the client's own
// partition config.
func (d *Driver) ReadDeployment(ctx context.Context) (*backend.Deployment, error) {
	if err := CheckSchema(ctx, d.c.Pool()); err != nil {
		return nil, mapErr(err, false)
	}
	return &backend.Deployment{Partitions: d.c.Partitions(), Found: true}, nil
}

// BindPartitions implements backend.DeploymentDriver: the client is the
// partition config, so d itself.
func (d *Driver) BindPartitions(model.PartitionConfig) backend.Driver { return d }
