package postgres_test

import (
	"testing"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/backendtest"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
)

// TestDriverConformance runs the backend.Driver conformance suite on the
// Postgres driver against a real server.
func TestDriverConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(t *testing.T) backend.Driver {
		return postgres.NewDriver(pgtest.Client(t, postgres.ClientConfig{}))
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
