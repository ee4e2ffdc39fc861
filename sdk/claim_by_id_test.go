package sdk_test

import (
	"errors"
	"testing"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestClaimExecution: a worker claims a chosen execution out of several,
// a second claim of it is refused as not claimable, one on a lane the
// worker does not serve is invalid input, and a missing one is not found.
func TestClaimExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	var ids []model.ExecutionID
	for range 3 {
		ids = append(ids, b.create(t, sdk.ExecutionSpec{Lane: "pick", Kind: "k"}))
	}
	other := b.create(t, sdk.ExecutionSpec{Lane: "elsewhere"})
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"pick"}})
	l, err := w.ClaimExecution(b.ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if l.ID != ids[1] || l.AttemptType != "initial" {
		t.Fatalf("lease = %s %s", l.ID, l.AttemptType)
	}
	if s := b.state(t, ids[1]); s.PublicState != model.PublicActive {
		t.Fatalf("claimed: %s", s.PublicState)
	}
	for _, id := range []model.ExecutionID{ids[0], ids[2]} {
		if s := b.state(t, id); s.PublicState != model.PublicWaiting {
			t.Fatalf("%s was touched: %s", id, s.PublicState)
		}
	}
	if _, err := w.ClaimExecution(b.ctx, ids[1]); !errors.Is(err, sdk.ErrNotClaimable) {
		t.Fatalf("second claim: %v", err)
	}
	if _, err := w.ClaimExecution(b.ctx, other); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Fatalf("other lane: %v", err)
	}
	if _, err := w.ClaimExecution(b.ctx, b.c.Partitions().NewSoloExecutionID("pick")); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := l.Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
}
