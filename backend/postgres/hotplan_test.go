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
		case strings.Contains(stmt, "INSERT INTO ff_exec_core"):
			got["create"] = pl
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"claim", "complete", "create"} {
		// The generic plan from the first execution on.
		if pl := got[k]; pl.generic < n || pl.custom > 0 {
			t.Errorf("%s statement: %d generic and %d custom plans, want the generic plan for every execution", k, pl.generic, pl.custom)
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

// The hot statements insert into the partition's own child: a create
// into ff_exec_core_p<r>, a claim's attempt into ff_attempt_p<r>, where
// r is the hash partition the rows land in (a completion event goes
// through ff_completion_event, whose identity column its children lack). A database whose children are laid out
// otherwise (here one renamed) gets the texts that insert through the
// partitioned tables, and works as before.
func TestHotInsertsIntoChildren(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	run := func(t *testing.T, c *postgres.Client) (child string, texts []string) {
		t.Helper()
		var ids []string
		for range 3 {
			id := newExec(t, c, &execOpts{lane: "kids"}).String()
			ids = append(ids, id[strings.Index(id, "}:")+2:])
		}
		for range 3 {
			r := claim(t, c, "kids")
			if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: r.ExecutionID, Fence: r.Fence()}); err != nil {
				t.Fatal(err)
			}
		}
		var n int
		if err := c.Pool().QueryRow(ctx, `SELECT min(tableoid::regclass::text), count(*) FROM ff_exec_core
 WHERE execution_id::text = ANY($1) AND lifecycle_phase = 'terminal'`, ids).Scan(&child, &n); err != nil || n != 3 {
			t.Fatalf("completed executions: %d, %v", n, err)
		}
		rows, err := c.Pool().Query(ctx, "SELECT statement FROM pg_prepared_statements")
		if err != nil {
			t.Fatal(err)
		}
		texts, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return child, texts
	}
	inserts := func(texts []string) map[string]bool {
		into := map[string]bool{}
		for _, s := range texts {
			for _, m := range regexp.MustCompile(`INSERT INTO (ff_(?:exec_core|attempt|completion_event)(?:_p\d+)?) `).FindAllStringSubmatch(s, -1) {
				into[m[1]] = true
			}
		}
		return into
	}

	child, texts := run(t, pgtest.Client(t, postgres.ClientConfig{MaxConns: 1}))
	r := strings.TrimPrefix(child, "ff_exec_core_p")
	into := inserts(texts)
	for _, want := range []string{"ff_exec_core_p" + r, "ff_attempt_p" + r, "ff_completion_event"} {
		if !into[want] {
			t.Errorf("no prepared statement inserts into %s (rows are in %s); inserts into %v", want, child, into)
		}
	}

	// Another layout: a child of ff_attempt renamed.
	url := pgtest.NewDatabase(t, true)
	admin := pgtest.Dial(t, url)
	probe := pgtest.Client(t, postgres.ClientConfig{URL: url, MaxConns: 1})
	probeChild, _ := run(t, probe)
	r = strings.TrimPrefix(probeChild, "ff_exec_core_p")
	if _, err := admin.Exec(ctx, "ALTER TABLE ff_attempt_p"+r+" RENAME TO ff_attempt_elsewhere"); err != nil {
		t.Fatal(err)
	}
	_, texts = run(t, pgtest.Client(t, postgres.ClientConfig{URL: url, MaxConns: 1}))
	into = inserts(texts)
	for _, want := range []string{"ff_exec_core", "ff_attempt", "ff_completion_event"} {
		if !into[want] {
			t.Errorf("renamed child: no prepared statement inserts into %s; inserts into %v", want, into)
		}
	}
	for table := range into {
		if strings.Contains(table, "_p") {
			t.Errorf("renamed child: a statement inserts into %s", table)
		}
	}
}
