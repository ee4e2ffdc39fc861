package sdk_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestClaimBatchOfResumed: on Postgres a batch claim that takes several
// resumed executions (delayed by their workers, promoted) grants them all
// — the lease-reason note of each resumed claim was joined to every
// attempt of the batch, so the statement failed on a duplicate key and
// the executions stayed eligible and unclaimed for ever (the demo's
// drain on Postgres waited on 7 of them).
func TestClaimBatchOfResumed(t *testing.T) {
	t.Parallel()
	pc := pgtest.Client(t, postgres.ClientConfig{})
	ctx := valkeytest.Context(t, 2*time.Minute)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "batch", Lanes: []string{"batch"}, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	want := map[model.ExecutionID]bool{}
	for range 3 {
		id, err := c.Enqueue(ctx, "k", nil, sdk.WithLane("batch"))
		if err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	ls, err := w.ClaimBatch(ctx, 3)
	if err != nil || len(ls) != 3 {
		t.Fatalf("first claims: %d %v", len(ls), err)
	}
	due := time.Now().Add(5 * time.Millisecond)
	for _, l := range ls {
		if err := l.Delay(ctx, due); err != nil {
			t.Fatal(err)
		}
	}
	valkeytest.Eventually(t, 30*time.Second, "the delays promoted", func() bool {
		r, err := pc.PromoteDelayedDue(ctx, uint16(ls[0].ID.Partition().Index), time.Now().UnixMilli(), 10)
		if err != nil {
			t.Fatal(err)
		}
		return r.Acted == 3
	})
	again, err := w.ClaimBatch(ctx, 3)
	if err != nil || len(again) != 3 {
		t.Fatalf("batch claim of three resumed executions: %d %v", len(again), err)
	}
	for _, l := range again {
		if !want[l.ID] || l.AttemptType != "resumed" {
			t.Fatalf("claimed %s (%s)", l.ID, l.AttemptType)
		}
	}
}
