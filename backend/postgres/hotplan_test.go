package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// The hot path runs under generic plans: after a few claims and group
// completions on one partition, the connection's prepared claim and
// complete statements have generic plans (pg_prepared_statements), and
// the connection is back under force_custom_plan between them.
func TestHotPathGenericPlans(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{MaxConns: 1})
	ctx := pgtest.Context(t, time.Minute)
	const n = 12
	for range n {
		newExec(t, c, &execOpts{lane: "hot"})
	}
	p := &postgres.ClaimForWorkerParams{LaneID: "hot", WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: 30_000}
	for range n {
		r, err := c.ClaimForWorker(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: r.ExecutionID, Fence: r.Fence()}); err != nil {
			t.Fatal(err)
		}
		if s := core(t, c, r.ExecutionID); s.Phase != "terminal" {
			t.Fatalf("%s after complete: %+v", r.ExecutionID, s)
		}
	}
	if _, err := c.ClaimForWorker(ctx, p); !errors.Is(err, postgres.CodeNoEligibleExecution) {
		t.Fatalf("claim of an empty lane: %v", err)
	}
	var mode string
	if err := c.Pool().QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode); err != nil || mode != "force_custom_plan" {
		t.Fatalf("plan_cache_mode between hot statements = %q, %v", mode, err)
	}
	rows, err := c.Pool().Query(ctx, "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
	if err != nil {
		t.Fatal(err)
	}
	type plans struct{ generic, custom int64 }
	got := map[string]plans{}
	for rows.Next() {
		var stmt string
		var pl plans
		if err := rows.Scan(&stmt, &pl.generic, &pl.custom); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.Contains(stmt, "WITH cand AS") && strings.Contains(stmt, "LIMIT $7"):
			got["claim"] = pl
		case strings.Contains(stmt, "INSERT INTO ff_completion_event"):
			got["complete"] = pl
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"claim", "complete"} {
		// Five custom plans, then the generic one for every execution.
		if pl := got[k]; pl.generic < n-6 || pl.custom > 6 {
			t.Errorf("%s statement: %d generic and %d custom plans, want the generic plan after the first five", k, pl.generic, pl.custom)
		}
	}
}

// A statement that fails inside the generic-plan pipeline rolls the SET
// back with its implicit transaction: the connection stays under
// force_custom_plan.
func TestGenericPlanPipelineErrorResets(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{MaxConns: 1})
	ctx := pgtest.Context(t, time.Minute)
	b := &pgx.Batch{}
	b.Queue("SET plan_cache_mode = auto")
	b.Queue("SELECT 1/0")
	b.Queue("RESET plan_cache_mode")
	err := postgres.ReadGenericBatchForTest(c.Pool().SendBatch(ctx, b), func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("batch error = %v, want division by zero", err)
	}
	var mode string
	if err := c.Pool().QueryRow(context.WithoutCancel(ctx), "SHOW plan_cache_mode").Scan(&mode); err != nil || mode != "force_custom_plan" {
		t.Fatalf("plan_cache_mode after a failed pipeline = %q, %v", mode, err)
	}
}
