package sdk_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestCompletionLeavesNoLeaseUnrun: a completion's pipelined claim of one
// can come back with two leases (fabric_claim_next claims one head and
// the head it refused for an existing grant is claimed by id too). Every
// lease the worker got is run or handed back; none stays leased, unrun,
// until its lease expires (the demo's "not terminal after the drain
// (none is leased)" of a newcomer's `make run`).
func TestCompletionLeavesNoLeaseUnrun(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	const lane = "cc"
	first := b.create(t, sdk.ExecutionSpec{Lane: lane, Kind: "k", Priority: 9})
	granted := b.create(t, sdk.ExecutionSpec{Lane: lane, Kind: "k", Priority: 5})
	plain := b.create(t, sdk.ExecutionSpec{Lane: lane, Kind: "k", Priority: 1})
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{lane}, Concurrency: 1,
		DisableNotifications: true, DisableReclaim: true})
	var mu sync.Mutex
	ran := map[model.ExecutionID]int{}
	handler := func(ctx context.Context, j *sdk.Job) error {
		mu.Lock()
		ran[j.ID]++
		mu.Unlock()
		if j.ID == first {
			// A grant for another instance of this worker id appears on the
			// next head while the first runs: the completion's claim refuses
			// that head, claims it by id and claims the one after it too.
			if err := b.vc.IssueClaimGrant(ctx, &valkey.IssueClaimGrantParams{ExecutionID: granted, WorkerID: "w",
				WorkerInstanceID: "another-instance", Lane: lane, GrantTTLMs: 60000}); err != nil {
				t.Errorf("issue grant: %v", err)
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handler) }()
	defer func() {
		cancel()
		<-done
	}()
	valkeytest.Eventually(t, 15*time.Second, "the first completed, the next run, and no execution left leased", func() bool {
		mu.Lock()
		next := ran[granted] + ran[plain]
		mu.Unlock()
		if next == 0 {
			return false
		}
		for _, id := range []model.ExecutionID{first, granted, plain} {
			s, err := b.c.State(b.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if s.OwnershipState == "leased" || (id == first && s.PublicState != "completed") {
				return false
			}
		}
		return true
	})
}

// TestClaimBatchKeepsToN: ClaimBatch(ctx, 1) on a lane whose head holds
// another instance's grant returns one lease and leaves no other
// execution leased (Run counts one slot per lease it asked for; a lease
// more than it asked for stalled Run's shutdown on its slots).
func TestClaimBatchKeepsToN(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	const lane = "kn"
	granted := b.create(t, sdk.ExecutionSpec{Lane: lane, Kind: "k", Priority: 5})
	plain := b.create(t, sdk.ExecutionSpec{Lane: lane, Kind: "k", Priority: 1})
	if err := b.vc.IssueClaimGrant(b.ctx, &valkey.IssueClaimGrantParams{ExecutionID: granted, WorkerID: "w",
		WorkerInstanceID: "another-instance", Lane: lane, GrantTTLMs: 60000}); err != nil {
		t.Fatal(err)
	}
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{lane}, DisableNotifications: true, DisableReclaim: true})
	ls, err := w.ClaimBatch(b.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 {
		t.Fatalf("ClaimBatch(1) returned %d leases", len(ls))
	}
	for _, id := range []model.ExecutionID{granted, plain} {
		if id == ls[0].ID {
			continue
		}
		if s := b.state(t, id); s.OwnershipState == "leased" {
			t.Fatalf("%s left leased beside the one lease returned", id)
		}
	}
	if st := w.Stats(); st.HandedBack != 0 {
		t.Fatalf("%d leases handed back: the claim took more than one", st.HandedBack)
	}
	if err := ls[0].Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// TestRunHoldsAtMostConcurrencyLeases: a worker of concurrency C whose
// lane has heads fabric_claim_next refuses (a grant for another instance
// of its worker id, which the worker then claims by id) never holds more
// than C leases, hands nothing back, and runs every execution once.
// Claiming those heads by id beside a full batch used to yield more than
// asked, and the extra leases went back through the delayed index.
func TestRunHoldsAtMostConcurrencyLeases(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	const lane, conc, total = "capc", 3, 24
	ids := make([]model.ExecutionID, total)
	for i := range ids {
		ids[i] = b.create(t, sdk.ExecutionSpec{Lane: lane, Kind: "k"})
	}
	for i := 0; i < total; i += 3 {
		if err := b.vc.IssueClaimGrant(b.ctx, &valkey.IssueClaimGrantParams{ExecutionID: ids[i], WorkerID: "w",
			WorkerInstanceID: "another-instance", Lane: lane, GrantTTLMs: 60000}); err != nil {
			t.Fatal(err)
		}
	}
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{lane}, Concurrency: conc,
		DisableNotifications: true, DisableReclaim: true})
	active := model.KeysOn(b.c.Partitions().SoloPartition(lane)).LaneActive(lane)
	raw := b.vc.Raw()
	var mu sync.Mutex
	ran := map[model.ExecutionID]int{}
	var held, maxHeld int64
	handler := func(ctx context.Context, j *sdk.Job) error {
		// Every lease of the lane is this worker's: the lane's active
		// index counts the leases it holds, run or not.
		n, err := raw.Do(ctx, raw.B().Zcard().Key(active).Build()).AsInt64()
		if err != nil {
			t.Errorf("zcard: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		ran[j.ID]++
		held = n
		maxHeld = max(maxHeld, n)
		return nil
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handler) }()
	valkeytest.Eventually(t, 20*time.Second, "every execution completed", func() bool {
		for _, id := range ids {
			if s, err := b.c.State(b.ctx, id); err != nil || s.PublicState != "completed" {
				return false
			}
		}
		return true
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxHeld > conc || maxHeld < 1 {
		t.Fatalf("the worker held up to %d leases at once (last seen %d), concurrency %d", maxHeld, held, conc)
	}
	for _, id := range ids {
		if ran[id] != 1 {
			t.Fatalf("%s ran %d times", id, ran[id])
		}
	}
	if st := w.Stats(); st.HandedBack != 0 || st.Completed != total {
		t.Fatalf("stats %+v: want nothing handed back and %d completed", st, total)
	}
}
