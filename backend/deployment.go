package backend

import (
	"context"

	"github.com/fabric-host/fabric/model"
)

// DeploymentDriver is what a client checks and reads once, when it
// starts: that the backend is ready for fabric, and the partition config
// every id and key is routed with. Both drivers implement it;
// backendtest runs each operation on both.
type DeploymentDriver interface {
	// ReadDeployment checks that the backend holds fabric's schema
	// (Postgres: migrated, otherwise ErrNotMigrated; Valkey loads its
	// function library on first use) and reads the deployment's partition
	// config: on Valkey ff:config:partitions (Found false, with the
	// defaults, when it is absent), on Postgres the client's own (Found
	// true).
	ReadDeployment(ctx context.Context) (*Deployment, error)
	// BindPartitions returns the driver routing with parts, the
	// deployment's config as ReadDeployment read it; a driver whose
	// client is its partition config (Postgres) returns itself.
	BindPartitions(parts model.PartitionConfig) Driver
}

// Deployment is the outcome of DeploymentDriver.ReadDeployment.
type Deployment struct {
	Partitions model.PartitionConfig
	// Found reports a stored partition config; false means the defaults.
	Found bool
}
