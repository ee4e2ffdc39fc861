package pgsuite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestSDKMuxAndEnqueueOptionsOnPostgres: the issue-25 SDK surface over the
// Postgres backend: EnqueueJSON with options (priority, idempotency key,
// retry) creates the execution, a second enqueue with the key returns the
// same id, a Mux with a typed handler runs it, an unknown kind fails
// permanently after one attempt despite a retry policy, and an invalid
// option is refused before the database is asked anything.
func TestSDKMuxAndEnqueueOptionsOnPostgres(t *testing.T) {
	t.Parallel()
	pc := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	type args struct{ N int }
	retry := sdk.WithRetry(2, sdk.FixedBackoff(time.Millisecond))
	id, err := sdk.EnqueueJSON(ctx, client, "square", args{N: 7}, sdk.WithLane("mux"), sdk.WithPriority(9),
		sdk.WithIdempotencyKey("square-7"), retry)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sdk.EnqueueJSON(ctx, client, "square", args{N: 7}, sdk.WithLane("mux"), sdk.WithIdempotencyKey("square-7"))
	if err != nil || again != id {
		t.Fatalf("second enqueue with the key = %s, %v; want %s", again, err, id)
	}
	if n := count(t, pc, `SELECT priority FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2::uuid`,
		int16(id.Partition().Index), id.UUIDString()); n != 9 {
		t.Fatalf("stored priority %d, want 9", n)
	}
	unknown, err := client.Enqueue(ctx, "nobody.handles.this", nil, sdk.WithLane("mux"), retry)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "square", nil, sdk.WithLane("mux"), sdk.WithPriority(-3)); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Fatalf("bad option: %v", err)
	}

	got := make(chan int, 1)
	mux := sdk.NewMux()
	mux.Use(sdk.Recover(pgtest.Logger()))
	sdk.HandleJSON(mux, "square", func(_ context.Context, job *sdk.Job, a args) error {
		got <- a.N * a.N
		return nil
	})
	w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "mux", Lanes: []string{"mux"}, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx, mux.ServeJob) }()
	if v := wait(t, got, time.Minute, "typed handler"); v != 49 {
		t.Fatalf("handler computed %d", v)
	}
	deadline := time.Now().Add(time.Minute)
	for stateOf(t, pc, unknown).Public != model.PublicFailed || stateOf(t, pc, id).Public != model.PublicCompleted {
		if time.Now().After(deadline) {
			t.Fatalf("unknown kind %+v, square %+v", stateOf(t, pc, unknown), stateOf(t, pc, id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := stateOf(t, pc, unknown); s.Index != 0 {
		t.Fatalf("unknown kind ran %d attempts after the first, want none (permanent)", s.Index)
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	_ = w.Close(context.Background())
}
