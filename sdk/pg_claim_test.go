package sdk_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// pgWorkerEnv is a client and a connected worker on a fresh database,
// and a two-minute context that starts once the database is ready.
func pgWorkerEnv(t *testing.T, cfg sdk.WorkerConfig) (context.Context, *sdk.Client, *sdk.Worker) {
	t.Helper()
	pc := pgtest.Client(t, postgres.ClientConfig{Partitions: model.PartitionConfig{Flow: 8, Budget: 2, Quota: 2}})
	ctx := pgtest.Context(t, 2*time.Minute)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = pgtest.Logger()
	w, err := sdk.Connect(ctx, pc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return ctx, c, w
}

// On Postgres, ClaimBatch leases up to n executions of the lane at once
// (one statement) and never more than asked; their completions, sent
// together, all land.
func TestPostgresClaimBatch(t *testing.T) {
	t.Parallel()
	ctx, c, w := pgWorkerEnv(t, sdk.WorkerConfig{WorkerID: "batch", Lanes: []string{"pg-batch"}})
	for range 5 {
		if _, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "pg-batch", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := w.ClaimBatch(ctx, 3)
	if err != nil || len(ls) != 3 {
		t.Fatalf("ClaimBatch(3): %d leases, %v", len(ls), err)
	}
	more, err := w.ClaimBatch(ctx, 10)
	if err != nil || len(more) != 2 {
		t.Fatalf("ClaimBatch(10): %d leases, %v", len(more), err)
	}
	ls = append(ls, more...)
	seen := map[model.ExecutionID]bool{}
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		if seen[l.ID] || string(l.Payload) != "x" {
			t.Fatalf("lease %s: duplicate %v, payload %q", l.ID, seen[l.ID], l.Payload)
		}
		seen[l.ID] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Complete(ctx, []byte("done"))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
		st, err := c.State(ctx, ls[i].ID)
		if err != nil || st.PublicState != model.PublicCompleted {
			t.Fatalf("state of %s: %+v, %v", ls[i].ID, st, err)
		}
	}
	if ls, err := w.ClaimBatch(ctx, 2); err != nil || len(ls) != 0 {
		t.Fatalf("claim of an empty lane: %d, %v", len(ls), err)
	}
}

// A Postgres Run whose poll backoff is a minute still picks new work up
// at once: the worker LISTENs on fabric_eligible and the create's
// trigger NOTIFYs it. With concurrency 4, every execution completes.
func TestPostgresRunWakesOnNotify(t *testing.T) {
	t.Parallel()
	ctx, c, w := pgWorkerEnv(t, sdk.WorkerConfig{WorkerID: "wake", Lanes: []string{"pg-wake"}, Concurrency: 4,
		IdlePollMin: time.Minute, IdlePollMax: time.Minute})
	ran := make(chan model.ExecutionID, 16)
	rctx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() {
		runDone <- w.Run(rctx, func(_ context.Context, j *sdk.Job) error {
			ran <- j.ID
			return nil
		})
	}()
	wait := func(what string) {
		t.Helper()
		// Well under the one-minute poll: only the notification wakes Run.
		deadline := time.NewTimer(20 * time.Second)
		defer deadline.Stop()
		select {
		case <-ran:
		case <-deadline.C:
			t.Fatalf("%s: not run within 20 s (idle poll is 1 min)", what)
		}
	}
	for i := range 3 {
		if _, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "pg-wake"}); err != nil {
			t.Fatal(err)
		}
		wait("execution " + string(rune('1'+i)))
	}
	stop()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if s := w.Stats(); s.Completed != 3 || s.Claimed != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// TestPostgresRunStopLeavesNoLease: a Run stopped while it claims (its
// context cancelled by a handler, as the demo's drain and Ctrl-C do)
// leaves nothing leased once it returns: a claim the server committed as
// the context ended is run, not lost to the client with its leases held
// by nobody until they expire.
func TestPostgresRunStopLeavesNoLease(t *testing.T) {
	t.Parallel()
	pc := pgtest.Client(t, postgres.ClientConfig{Partitions: model.PartitionConfig{Flow: 8, Budget: 2, Quota: 2}})
	ctx := pgtest.Context(t, 2*time.Minute)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		lane := fmt.Sprintf("pg-stop-%d", round)
		for range 40 {
			if _, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: lane, Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "stop", Lanes: []string{lane}, Concurrency: 8,
			ShutdownTimeout: 5 * time.Second, Logger: pgtest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		var ran atomic.Int32
		err = w.Run(runCtx, func(context.Context, *sdk.Job) error {
			if ran.Add(1) == 10 {
				stop()
			}
			return nil
		})
		stop()
		if err != nil {
			t.Fatalf("round %d: Run: %v", round, err)
		}
		var leased int
		if err := pc.Pool().QueryRow(ctx, `SELECT count(*) FROM ff_exec_core WHERE lane_id = $1 AND ownership_state = 'leased'`,
			lane).Scan(&leased); err != nil {
			t.Fatal(err)
		}
		_ = w.Close(ctx)
		if leased != 0 {
			t.Fatalf("round %d: %d executions left leased after Run returned (%d handled)", round, leased, ran.Load())
		}
	}
}
