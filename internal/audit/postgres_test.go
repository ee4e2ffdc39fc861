package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/sdk"
)

// TestPostgresAuditOneSnapshot: an execution that ends between the
// audit's count of terminal executions and its scan of the rest is still
// counted once (both reads see one snapshot). Read one after the other, it
// was in neither, and `fabric run --demo` on Postgres reported one
// execution fewer than it had submitted (CI).
func TestPostgresAuditOneSnapshot(t *testing.T) {
	pc := pgtest.Client(t, postgres.ClientConfig{Logger: pgtest.Logger()})
	ctx := pgtest.Context(t, 3*time.Minute)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "a", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	// The execution ends between the two reads (as a worker's completion
	// would: a committed change of its phase).
	audit.SetBetweenReads(func() {
		if _, err := pc.Pool().Exec(context.WithoutCancel(ctx), `UPDATE ff_exec_core SET lifecycle_phase = 'terminal'`); err != nil {
			t.Errorf("end the execution: %v", err)
		}
	})
	t.Cleanup(func() { audit.SetBetweenReads(nil) })
	rep, err := audit.Postgres(ctx, pc.Pool(), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 1 {
		t.Fatalf("audit checked %d executions of 1 (%s)", rep.Checked, rep.Summary())
	}
}

// TestPostgresAuditNamesPostgresScanners: a delay long past that nothing
// promoted is a violation whose hint names the Postgres promoter
// (pg_delayed_promoter), not the Valkey plugin.
func TestPostgresAuditNamesPostgresScanners(t *testing.T) {
	pc := pgtest.Client(t, postgres.ClientConfig{Logger: pgtest.Logger()})
	ctx := pgtest.Context(t, 3*time.Minute)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "a", Kind: "k", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Pool().Exec(ctx, `UPDATE ff_exec_core SET deadline_at_ms = 1000`); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Postgres(ctx, pc.Pool(), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].ID != id.UUIDString() ||
		!strings.Contains(rep.Violations[0].Problem, "not promoted within 30s (is pg_delayed_promoter running?)") {
		t.Fatalf("violations %v, want %s not promoted, naming pg_delayed_promoter", rep.Violations, id)
	}
}
