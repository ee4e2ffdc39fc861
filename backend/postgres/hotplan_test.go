package postgres_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
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
	var mode, sorts string
	if err := c.Pool().QueryRow(ctx, "SELECT current_setting('plan_cache_mode'), current_setting('enable_sort')").Scan(&mode, &sorts); err != nil || mode != "force_custom_plan" || sorts != "on" {
		t.Fatalf("plan_cache_mode, enable_sort between hot statements = %q, %q, %v", mode, sorts, err)
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

// A statement that fails inside the generic-plan pipeline rolls the
// setting back with its implicit transaction: the connection stays under
// force_custom_plan (and sorts stay on).
func TestGenericPlanPipelineErrorResets(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{MaxConns: 1})
	ctx := pgtest.Context(t, time.Minute)
	b := &pgx.Batch{}
	b.Queue(postgres.SQLClaimPlansForTest)
	b.Queue("SELECT 1/0")
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
	if err := c.Pool().QueryRow(context.WithoutCancel(ctx), "SHOW enable_sort").Scan(&mode); err != nil || mode != "on" {
		t.Fatalf("enable_sort after a failed pipeline = %q, %v", mode, err)
	}
}

// A claim reads its partial index in order even when the partition's
// statistics say it is empty (a fresh database that autovacuum has not
// analyzed yet): with sorts allowed, the planner's choice there was
// FlowFabric's (partition, lane, phase) index and a sort of every
// runnable row of the lane, per claim. And the claimer analyzes its
// lanes' fresh partitions once they hold rows: the generic plan a
// connection made at its first claims, on a nearly empty partition,
// updated the claimed rows through a scan of the whole partition, once
// per claim, for as long as the connection kept it.
func TestClaimPlanOnFreshPartition(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{MaxConns: 6})
	ctx := pgtest.Context(t, time.Minute)
	const lane = "fresh"
	create := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 4 {
					_, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: parts.NewSoloExecutionID(lane),
						Namespace: "ns", LaneID: lane, ExecutionKind: "test", Payload: []byte("in")})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	wholePartition := regexp.MustCompile(`(?m)Index Cond: \(partition_key = '\d+'::smallint\)$`)
	explain := func(what string, p *postgres.ClaimPlanForTest) string {
		t.Helper()
		plan, err := p.Explain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plan, "Sort") || !strings.Contains(plan, "priority_created_at") {
			t.Fatalf("%s: claim plan sorts or misses the claim index:\n%s", what, plan)
		}
		return plan
	}
	create(2)
	kept, err := postgres.NewClaimPlanForTest(ctx, c, lane, true)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	if plan := explain("generic, 2 rows", kept); wholePartition.FindString(plan) == "" {
		t.Logf("the planner no longer reads the whole partition on a nearly empty one:\n%s", plan)
	}
	// 1,000 runnable rows (with 50, each index is one page and the claim
	// index wins anyway).
	create(998)
	custom, err := postgres.NewClaimPlanForTest(ctx, c, lane, false)
	if err != nil {
		t.Fatal(err)
	}
	explain("custom, 1,000 rows, no statistics", custom)
	custom.Close()

	cl, err := postgres.NewDriver(c).NewClaimer(ctx, &backend.ClaimerConfig{WorkerID: "w", WorkerInstanceID: "wi",
		Lanes: []string{lane}, LeaseTTLMs: 30_000})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The claimer's background scan analyzes the solo partition's
	// children (ff_exec_core's; ff_attempt's has no rows yet), which ends
	// the kept plan.
	for {
		var analyzed bool
		err := c.Pool().QueryRow(ctx, `SELECT pg_stat_get_last_analyze_time(tableoid) IS NOT NULL FROM ff_exec_core
 WHERE partition_key = $1 LIMIT 1`, int16(parts.SoloPartition(lane).Index)).Scan(&analyzed)
		if err != nil {
			t.Fatal(err)
		}
		if analyzed {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the claimer never analyzed the lane's partition")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if plan := explain("generic, kept, after the claimer's analyze", kept); wholePartition.FindString(plan) != "" {
		t.Fatalf("the kept claim plan still reads the whole partition after the claimer's analyze:\n%s", plan)
	}
}
