package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

// `fabric executions stuck --postgres-url`: an eligible execution states
// why it waits (exit 0); one left in a state nothing acts on is named
// (exit 1); an unmigrated database is told to run fabric migrate.
func TestExecutionsStuckOnPostgres(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := postgres.StartServer(ctx, postgres.ServerConfig{Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	url := srv.URL("postgres")
	if code, out, errOut := runCmd(t, "executions", "stuck", "--postgres-url", url); code != 1 || !strings.Contains(errOut, "fabric migrate") {
		t.Fatalf("unmigrated: code %d\n%s%s", code, out, errOut)
	}
	pc, err := postgres.Connect(ctx, postgres.ClientConfig{URL: url, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := postgres.Migrate(ctx, pc.Pool(), postgres.MigrateConfig{}); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "l"}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "executions", "stuck", "--postgres-url", url)
	if code != 0 || !strings.Contains(out, "1 executions: 0 terminal; waiting: eligible 1; violations: 0") {
		t.Fatalf("healthy: code %d\n%s%s", code, out, errOut)
	}
	if _, err := pc.Pool().Exec(ctx, "UPDATE ff_exec_core SET eligibility_state = 'limbo'"); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCmd(t, "executions", "stuck", "--postgres-url", url)
	if code != 1 || !strings.Contains(out, "limbo") || !strings.Contains(out, "violations: 1") {
		t.Fatalf("limbo: code %d\n%s", code, out)
	}
	if code, _, errOut := runCmd(t, "executions", "stuck"); code != 2 || !strings.Contains(errOut, "--valkey-url and --postgres-url") {
		t.Fatalf("no target: code %d %s", code, errOut)
	}
}
