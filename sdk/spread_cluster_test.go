package sdk_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// spreadBundle connects a client to the shared 3-primary cluster and makes
// a fresh lane spread over k partitions.
func spreadBundle(t *testing.T, k uint16) (*testBundle, *valkeytest.Cluster, string) {
	t.Helper()
	cl := valkeytest.SharedCluster(t)
	vc := valkeytest.ClusterClient(t)
	ctx := valkeytest.Context(t, 120*time.Second)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	lane := "spread-" + model.NewUUID().String()[:8]
	if err := c.SetLaneSpread(ctx, lane, model.LaneSpread{Spread: true, K: k}); err != nil {
		t.Fatal(err)
	}
	return &testBundle{vc: vc, c: c, ctx: ctx}, cl, lane
}

// TestSpreadLaneOnCluster: a lane spread over every flow partition places
// its executions on all three primaries (a default lane's all land on its
// one partition), and three workers claim every one of them exactly once.
func TestSpreadLaneOnCluster(t *testing.T) {
	t.Parallel()
	b, cl, lane := spreadBundle(t, 0)
	if s, err := b.c.LaneSpread(b.ctx, lane); err != nil || !s.Spread {
		t.Fatalf("lane spread read back %+v, %v", s, err)
	}
	const n = 120
	specs := make([]sdk.ExecutionSpec, n)
	for i := range specs {
		specs[i] = sdk.ExecutionSpec{Lane: lane, Payload: []byte(fmt.Sprint(i))}
	}
	ids, err := b.c.EnqueueMany(b.ctx, specs...)
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[int]int{}
	parts := map[model.Partition]bool{}
	for _, id := range ids {
		node, err := cl.NodeOf(b.ctx, model.KeysFor(id).Core())
		if err != nil {
			t.Fatal(err)
		}
		perNode[node]++
		parts[id.Partition()] = true
	}
	if len(perNode) != valkeytest.ClusterPrimaries {
		t.Fatalf("%d executions of a spread lane on %d nodes (%v), want all %d", n, len(perNode), perNode, valkeytest.ClusterPrimaries)
	}
	// A default lane stays on FlowFabric's one partition.
	plain := "plain-" + model.NewUUID().String()[:8]
	for range 5 {
		if id := b.create(t, sdk.ExecutionSpec{Lane: plain}); id.Partition() != b.vc.Partitions().SoloPartition(plain) {
			t.Fatalf("default lane execution %s off its solo partition", id)
		}
	}
	t.Logf("%d executions over %d partitions, per node %v", n, len(parts), perNode)

	var mu sync.Mutex
	claimed := map[model.ExecutionID]int{}
	total := 0
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		w := b.worker(t, sdk.WorkerConfig{WorkerID: fmt.Sprintf("spread-%d", i), Lanes: []string{lane},
			LeaseTTL: time.Minute, Concurrency: 4, IdlePollMin: time.Millisecond})
		if len(w.SpreadPartitions()) != int(b.vc.Partitions().Flow) {
			t.Fatalf("worker reads %d spread partitions, want %d", len(w.SpreadPartitions()), b.vc.Partitions().Flow)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := total >= n
				mu.Unlock()
				if done || b.ctx.Err() != nil {
					return
				}
				ls, err := w.ClaimBatch(b.ctx, 4)
				if err != nil {
					errs <- err
					return
				}
				for _, l := range ls {
					if err := l.Complete(b.ctx, nil); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					claimed[l.ID]++
					total++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range ids {
		if claimed[id] != 1 {
			t.Fatalf("%s claimed %d times, want exactly once", id, claimed[id])
		}
		if s := b.state(t, id); s.TerminalOutcome != "success" {
			t.Fatalf("%s ended %q/%q", id, s.PublicState, s.TerminalOutcome)
		}
	}
	if len(claimed) != n {
		t.Fatalf("claimed %d distinct executions, want %d", len(claimed), n)
	}
}

// TestSpreadNoPartitionStarves: with a backlog on every partition of a
// lane spread over 24, a worker reads the partitions round robin, so the
// oldest eligible execution of every partition is claimed within the
// first two batches (24 partitions, 16 per window), long before the
// backlog (about 20 per partition) drains. The clock is frozen so that the
// bound counts batches, not time; notifications are off so only the
// windows find work.
func TestSpreadNoPartitionStarves(t *testing.T) {
	t.Parallel()
	const k, n = 24, 480
	b, _, lane := spreadBundle(t, k)
	specs := make([]sdk.ExecutionSpec, n)
	for i := range specs {
		specs[i] = sdk.ExecutionSpec{Lane: lane}
	}
	if _, err := b.c.EnqueueMany(b.ctx, specs...); err != nil {
		t.Fatal(err)
	}
	raw := b.vc.Raw()
	oldest := map[model.ExecutionID]model.Partition{}
	for _, p := range (model.SpreadSolo{K: k}).Partitions(lane, b.vc.Partitions()) {
		head, err := raw.Do(b.ctx, raw.B().Zrange().Key(model.KeysOn(p).LaneEligible(lane)).Min("0").Max("0").Build()).AsStrSlice()
		if err != nil || len(head) != 1 {
			t.Fatalf("partition %v head: %v, %v (want one eligible execution on every spread partition)", p, head, err)
		}
		oldest[model.ExecutionID(head[0])] = p
	}
	frozen := time.Now()
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "spread-fair", Lanes: []string{lane}, LeaseTTL: time.Minute,
		DisableNotifications: true, Clock: func() time.Time { return frozen }})
	claimedAt := map[model.ExecutionID]int{}
	total := 0
	for batch := 1; total < n; batch++ {
		if batch > n {
			t.Fatalf("%d of %d claimed after %d batches", total, n, batch)
		}
		ls, err := w.ClaimBatch(b.ctx, 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if _, dup := claimedAt[l.ID]; dup {
				t.Fatalf("%s claimed twice", l.ID)
			}
			claimedAt[l.ID] = batch
			total++
			if err := l.Complete(b.ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	last := 0
	for id, p := range oldest {
		at, ok := claimedAt[id]
		if !ok || at > 2 {
			t.Fatalf("oldest eligible execution of partition %v claimed in batch %d (claimed: %v), want within 2", p, at, ok)
		}
		last = max(last, at)
	}
	t.Logf("every partition's oldest claimed by batch %d; backlog of %d drained in %d batches", last, n, maxBatch(claimedAt))
}

func maxBatch(m map[model.ExecutionID]int) int {
	out := 0
	for _, v := range m {
		out = max(out, v)
	}
	return out
}
