package pgsuite_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestSDKOnPostgres: SDK workers on Postgres complete N executions exactly
// once (several workers, each running handlers concurrently, claiming with
// SKIP LOCKED), and the create→claim→complete rate is reported.
func TestSDKOnPostgres(t *testing.T) {
	t.Parallel()
	const (
		n         = 1000
		workers   = 4
		producers = 4
	)
	pc := pgtest.Client(t, postgres.ClientConfig{Partitions: parts, MaxConns: 24})
	ctx := pgtest.Context(t, 3*time.Minute)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}

	var (
		handled   sync.Map // id → *atomic.Int32
		completed atomic.Int64
		allDone   = make(chan struct{})
	)
	handler := func(_ context.Context, job *sdk.Job) error {
		v, _ := handled.LoadOrStore(job.ID, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		job.SetResult(job.Payload)
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ws := make([]*sdk.Worker, workers)
	for i := range ws {
		w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "eo", Lanes: []string{"eo"}, Concurrency: 4,
			LeaseTTL: 30 * time.Second, Logger: pgtest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(runCtx, func(c context.Context, job *sdk.Job) error {
				err := handler(c, job)
				if completed.Add(1) == n {
					close(allDone)
				}
				return err
			}); err != nil {
				t.Errorf("run: %v", err)
			}
		}()
	}

	start := time.Now()
	ids := make(chan model.ExecutionID, n)
	var pw sync.WaitGroup
	for p := range producers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for i := p; i < n; i += producers {
				id, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "eo", Kind: "echo", Payload: []byte(fmt.Sprint(i))})
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				ids <- id
			}
		}()
	}
	pw.Wait()
	created := time.Since(start)
	close(ids)
	select {
	case <-allDone:
	case <-ctx.Done():
		t.Fatalf("only %d of %d handled", completed.Load(), n)
	}
	elapsed := time.Since(start)
	stop()
	wg.Wait()
	for _, w := range ws {
		if err := w.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("postgres SDK: %d executions create→claim→complete in %s = %.0f/s (creates alone %.0f/s; %d workers × 4 handlers, %d producers)",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), float64(n)/created.Seconds(), workers, producers)

	seen := 0
	for id := range ids {
		seen++
		v, ok := handled.Load(id)
		if !ok || v.(*atomic.Int32).Load() != 1 {
			t.Fatalf("%s handled %v times", id, v)
		}
	}
	if seen != n {
		t.Fatalf("%d ids created", seen)
	}
	// Every Complete landed (Run ended gracefully after the handlers).
	pgtest.Eventually(t, 30*time.Second, "all completed in the database", func() bool {
		return count(t, pc, `SELECT count(*) FROM ff_exec_core WHERE lane_id = 'eo' AND public_state = 'completed'`) == n
	})
	if got := count(t, pc, `SELECT count(*) FROM ff_completion_event WHERE outcome = 'success'`); got != n {
		t.Fatalf("%d success completion events, want %d", got, n)
	}
	if got := count(t, pc, `SELECT count(*) FROM ff_attempt WHERE lease_epoch = 1 AND outcome = 'success'`); got != n {
		t.Fatalf("%d single-epoch successful attempts, want %d", got, n)
	}
	var st sdk.Stats
	for _, w := range ws {
		s := w.Stats()
		st.Claimed += s.Claimed
		st.Completed += s.Completed
	}
	if st.Claimed != n || st.Completed != n {
		t.Fatalf("workers claimed %d completed %d, want %d", st.Claimed, st.Completed, n)
	}
}

// TestSDKOnPostgresRetryAndUnsupported: a failing handler is retried per
// the policy (the delayed retry is made eligible by PromoteDelayedDue, as
// pg_delayed_promoter would), the client reads its state and result, and
// a refused suspend (on a pending waitpoint that does not exist) leaves
// the lease usable.
func TestSDKOnPostgresRetryAndUnsupported(t *testing.T) {
	t.Parallel()
	pc := pgtest.Client(t, postgres.ClientConfig{Partitions: parts})
	ctx := pgtest.Context(t, time.Minute)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "rt", Kind: "flaky",
		Policy: &sdk.Policy{MaxRetries: 1, Backoff: sdk.FixedBackoff(time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "rt", Lanes: []string{"rt"}, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })

	l, err := w.ClaimNext(ctx)
	if err != nil || l == nil || l.ID != id || l.AttemptIndex != 0 {
		t.Fatalf("claim: %+v %v", l, err)
	}
	if _, err := l.Suspend(ctx, sdk.SuspendSpec{Pending: &sdk.Waitpoint{ID: model.NewUUID().String()}}); !errors.Is(err, backend.ErrWaitpointNotFound) {
		t.Fatalf("suspend on a missing pending waitpoint: %v", err)
	}
	res, err := l.Fail(ctx, "boom", sdk.CategoryTransient, true)
	if err != nil || !res.RetryScheduled {
		t.Fatalf("fail: %+v %v", res, err)
	}
	if _, err := pc.PromoteDelayedDue(ctx, id.Partition().Index, res.RetryAt.UnixMilli(), 0); err != nil {
		t.Fatal(err)
	}
	l2, err := w.ClaimNext(ctx)
	if err != nil || l2 == nil || l2.AttemptIndex != 1 || l2.AttemptType != "retry" {
		t.Fatalf("retry claim: %+v %v", l2, err)
	}
	if err := l2.Complete(ctx, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := l2.Complete(ctx, nil); !errors.Is(err, sdk.ErrLeaseFinished) {
		t.Fatalf("second complete: %v", err)
	}
	if st := stateOf(t, pc, id); st.Public != "completed" || st.Index != 1 {
		t.Fatalf("%+v", st)
	}
	if st, err := client.State(ctx, id); err != nil || st.PublicState != "completed" || st.AttemptCount != 2 || st.RetryCount != 1 {
		t.Fatalf("state: %+v %v", st, err)
	}
	if r, err := client.Result(ctx, id); err != nil || string(r) != "ok" {
		t.Fatalf("result: %q %v", r, err)
	}
}
