package postgres_test

import (
	"context"
	"testing"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/backendtest"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

// TestDriverConformance runs the backend.Driver conformance suite on the
// Postgres driver against a real server.
func TestDriverConformance(t *testing.T) {
	t.Parallel()
	var c *postgres.Client
	backendtest.RunWith(t, func(t *testing.T) backend.Driver {
		c = pgtest.Client(t, postgres.ClientConfig{})
		return postgres.NewDriver(c)
	}, backendtest.Options{
		// The pg_attempt_timeout plugin's pass (its statements) over the
		// execution's partition.
		SweepAttemptTimeouts: func(ctx context.Context, _ backend.Driver, id model.ExecutionID, now int64) error {
			_, err := c.ReconcileAttemptTimeouts(ctx, id.Partition().Index, now, 0)
			return err
		},
		// The pg_delayed_promoter pass over the execution's partition.
		PromoteDelayed: func(ctx context.Context, _ backend.Driver, id model.ExecutionID, now int64) error {
			_, err := c.PromoteDelayedDue(ctx, id.Partition().Index, now, 0)
			return err
		},
	})
}

// TestDriverUnmigrated checks the Postgres driver's answer on a database
// `fabric migrate` never ran on.
func TestDriverUnmigrated(t *testing.T) {
	t.Parallel()
	backendtest.RunUnmigrated(t, func(t *testing.T) backend.Driver {
		return postgres.NewDriver(pgtest.Client(t, postgres.ClientConfig{URL: pgtest.NewDatabase(t, false)}))
	})
}
