package pgsuite_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestSDKEnqueueManyOnPostgres: EnqueueMany creates a batch over the
// Postgres backend (a reused idempotency key yields the first id), a
// worker runs every execution, a TrySuspend on a missing pending
// waitpoint is refused with the lease kept, and budgets, quotas and Admit
// work (an unknown quota is ErrNotFound).
func TestSDKEnqueueManyOnPostgres(t *testing.T) {
	t.Parallel()
	pc := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	var specs []sdk.ExecutionSpec
	for i := range 5 {
		s, err := sdk.BuildSpec("batch", []byte(strconv.Itoa(i)), sdk.WithLane("batch"), sdk.WithIdempotencyKey("b-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	ids, err := client.EnqueueMany(ctx, append(specs, specs[2])...)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 6 || ids[5] != ids[2] || ids[0] == "" || ids[0] == ids[1] {
		t.Fatalf("ids = %v", ids)
	}
	if _, err := client.EnqueueMany(ctx, specs[0], sdk.ExecutionSpec{Kind: "x"}); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Fatalf("invalid spec in a batch: %v", err)
	}
	if _, err := client.CreateBudget(ctx, sdk.Budget{Limits: map[string]sdk.BudgetLimit{"t": {Hard: 1}}}); err != nil {
		t.Fatalf("CreateBudget: %v", err)
	}
	if _, err := client.CreateQuota(ctx, sdk.Quota{Window: time.Second, MaxConcurrent: 1}); err != nil {
		t.Fatalf("CreateQuota: %v", err)
	}

	w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "batch", Lanes: []string{"batch"}, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	seen := map[string]bool{}
	first := true
	deadline := time.Now().Add(time.Minute)
	for len(seen) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("claimed %d of 5", len(seen))
		}
		l, err := w.ClaimNext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if first {
			first = false
			if _, err := l.TrySuspend(ctx, sdk.SuspendSpec{Pending: &sdk.Waitpoint{ID: model.NewUUID().String()}}); !errors.Is(err, backend.ErrWaitpointNotFound) {
				t.Fatalf("TrySuspend on a missing pending waitpoint: %v", err)
			}
			if sigs, err := l.ResumeSignals(ctx); err != nil || sigs != nil {
				t.Fatalf("ResumeSignals of a first attempt: %v %v", sigs, err)
			}
			if _, err := l.Admit(ctx, model.NewUUID()); !errors.Is(err, sdk.ErrNotFound) {
				t.Fatalf("Admit on an unknown quota: %v", err)
			}
		}
		seen[string(l.Payload)] = true
		if err := l.Complete(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids[:5] {
		if s := stateOf(t, pc, id); s.Public != model.PublicCompleted {
			t.Fatalf("%s: %+v", id, s)
		}
	}
}
