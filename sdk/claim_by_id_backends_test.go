package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestClaimExecutionBackends: Worker.ClaimExecution answers the same on
// both backends — the chosen execution claimed (the others untouched) and
// completed, a second claim not claimable, another lane invalid input, a
// missing execution not found, one needing a capability the worker lacks
// not claimable.
func TestClaimExecutionBackends(t *testing.T) {
	t.Parallel()
	for _, b := range sdkBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c, worker := b.open(t, ctx)
			var ids []model.ExecutionID
			for range 3 {
				id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "pick", Kind: "k", Payload: []byte("in")})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			other, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "elsewhere", Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			gpu, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "pick", Kind: "k",
				Policy: &sdk.Policy{RequiredCapabilities: []string{"gpu"}}})
			if err != nil {
				t.Fatal(err)
			}
			w := worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"pick"}})
			l, err := w.ClaimExecution(ctx, ids[1])
			if err != nil {
				t.Fatal(err)
			}
			if l.ID != ids[1] || l.AttemptType != "initial" || l.Lane != "pick" || string(l.Payload) != "in" {
				t.Fatalf("lease = %s %s %s %q", l.ID, l.AttemptType, l.Lane, l.Payload)
			}
			for i, want := range []string{model.PublicWaiting, model.PublicActive, model.PublicWaiting} {
				if s, err := c.State(ctx, ids[i]); err != nil || s.PublicState != want {
					t.Fatalf("state of %s: %+v %v, want %s", ids[i], s, err, want)
				}
			}
			if _, err := w.ClaimExecution(ctx, ids[1]); !errors.Is(err, sdk.ErrNotClaimable) {
				t.Fatalf("second claim: %v", err)
			}
			if _, err := w.ClaimExecution(ctx, other); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("other lane: %v", err)
			}
			if _, err := w.ClaimExecution(ctx, c.Partitions().NewSoloExecutionID("pick")); !errors.Is(err, sdk.ErrNotFound) {
				t.Fatalf("missing: %v", err)
			}
			if _, err := w.ClaimExecution(ctx, gpu); !errors.Is(err, sdk.ErrNotClaimable) {
				t.Fatalf("needs gpu: %v", err)
			}
			if err := l.Complete(ctx, []byte("out")); err != nil {
				t.Fatal(err)
			}
			if r, err := c.Result(ctx, ids[1]); err != nil || string(r) != "out" {
				t.Fatalf("result: %q %v", r, err)
			}
		})
	}
}
