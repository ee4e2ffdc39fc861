package sdk_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestWorkersOfOneLaneDoNotCollide: workers of one lane claiming batches
// at once from its solo partition each get a full batch in one ClaimBatch
// (the server picks the heads, so no claim is lost to another worker),
// no execution is claimed twice, and every one is claimed, in priority
// order within each batch.
func TestWorkersOfOneLaneDoNotCollide(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	const workers, batch = 4, 5
	want := map[model.ExecutionID]bool{}
	for i := range workers * batch {
		want[b.create(t, sdk.ExecutionSpec{Lane: "race", Kind: "k", Priority: i % 3})] = true
	}
	ws := make([]*sdk.Worker, workers)
	for i := range ws {
		ws[i] = b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"race"}, DisableNotifications: true, DisableReclaim: true})
	}
	got := make([][]*sdk.Lease, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = w.ClaimBatch(b.ctx, batch)
		}()
	}
	wg.Wait()
	seen := map[model.ExecutionID]bool{}
	for i := range ws {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if len(got[i]) != batch {
			t.Fatalf("worker %d claimed %d in one ClaimBatch, want %d", i, len(got[i]), batch)
		}
		prev := 10
		for _, l := range got[i] {
			if seen[l.ID] || !want[l.ID] {
				t.Fatalf("execution %s claimed twice or unknown", l.ID)
			}
			seen[l.ID] = true
			p, err := strconv.Atoi(b.state(t, l.ID).Fields["priority"])
			if err != nil {
				t.Fatal(err)
			}
			if p > prev {
				t.Fatalf("worker %d claimed priority %d after %d", i, p, prev)
			}
			prev = p
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("claimed %d of %d", len(seen), len(want))
	}
	for _, ls := range got {
		for _, l := range ls {
			if err := l.Complete(b.ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}
