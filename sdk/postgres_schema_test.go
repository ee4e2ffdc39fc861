package sdk_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/sdk"
)

// TestPostgresNotMigrated: the SDK on a database `fabric migrate` never
// ran on answers postgres.ErrNotMigrated naming the command, from
// NewClient and Connect alike, instead of a raw
// `relation "ff_exec_core" does not exist` at the first operation.
func TestPostgresNotMigrated(t *testing.T) {
	t.Parallel()
	pc := pgtest.Client(t, postgres.ClientConfig{URL: pgtest.NewDatabase(t, false)})
	ctx := pgtest.Context(t, time.Minute)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, postgres.ErrNotMigrated) || !strings.Contains(err.Error(), "run `fabric migrate") ||
			strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%s on an unmigrated database: %v", what, err)
		}
	}
	_, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	check("NewClient", err)
	_, err = sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, Logger: pgtest.Logger()})
	check("Connect", err)
}
