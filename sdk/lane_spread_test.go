package sdk_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestLaneSpreadChoice: a lane's choice is stored in its configuration
// hash where every producer reads it; a producer caches it (a change by
// another producer is not seen until LaneSpreadTTL), its own change takes
// effect at once; idempotent enqueues of a spread lane find the first
// execution; a default lane stays on FlowFabric's partition; a bad stored
// value fails the enqueue instead of placing the execution elsewhere, while
// a worker of that lane still connects.
func TestLaneSpreadChoice(t *testing.T) {
	t.Parallel()
	a := setup(t, 0)
	other, err := sdk.NewClient(a.ctx, sdk.ClientConfig{Backend: a.vc})
	if err != nil {
		t.Fatal(err)
	}
	lane := "ls-" + model.NewUUID().String()[:8]
	pc := a.vc.Partitions()
	home := pc.SoloPartition(lane)
	// other reads the default and caches it.
	if s, err := other.LaneSpread(a.ctx, lane); err != nil || s.Spread {
		t.Fatalf("fresh lane: %+v, %v", s, err)
	}
	if err := a.c.SetLaneSpread(a.ctx, lane, model.LaneSpread{Spread: true, K: 8}); err != nil {
		t.Fatal(err)
	}
	m, err := a.vc.Raw().Do(a.ctx, a.vc.Raw().B().Hgetall().Key(model.LaneConfigKey(lane)).Build()).AsStrMap()
	if err != nil || m[model.LaneFieldSoloPartitioner] != "spread" || m[model.LaneFieldSpreadPartitions] != "8" {
		t.Fatalf("stored lane config %v, %v", m, err)
	}
	in := map[model.Partition]bool{}
	for _, p := range (model.SpreadSolo{K: 8}).Partitions(lane, pc) {
		in[p] = true
	}
	seen := map[model.Partition]bool{}
	for range 60 {
		id := a.create(t, sdk.ExecutionSpec{Lane: lane})
		if !in[id.Partition()] {
			t.Fatalf("%s outside the lane's 8 partitions", id)
		}
		seen[id.Partition()] = true
	}
	if len(seen) < 2 {
		t.Fatalf("60 executions of a spread lane on %d partition(s)", len(seen))
	}
	if id, err := other.CreateExecution(a.ctx, sdk.ExecutionSpec{Lane: lane}); err != nil || id.Partition() != home {
		t.Fatalf("a producer with the default cached placed %s (%v), want its home %v until the TTL", id, err, home)
	}
	first := a.create(t, sdk.ExecutionSpec{Lane: lane, IdempotencyKey: "k1"})
	for range 5 {
		if again := a.create(t, sdk.ExecutionSpec{Lane: lane, IdempotencyKey: "k1"}); again != first {
			t.Fatalf("idempotent enqueue on a spread lane: %s, want %s", again, first)
		}
	}
	raw := a.vc.Raw()
	bad := "ls-bad-" + model.NewUUID().String()[:8]
	if err := raw.Do(a.ctx, raw.B().Hset().Key(model.LaneConfigKey(bad)).FieldValue().
		FieldValue(model.LaneFieldSoloPartitioner, "ring").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.CreateExecution(a.ctx, sdk.ExecutionSpec{Lane: bad}); err == nil {
		t.Fatal("a lane with an unknown partitioner accepted an execution")
	}
	if w, err := sdk.Connect(a.ctx, a.vc, sdk.WorkerConfig{WorkerID: "ls-bad", Lanes: []string{bad}}); err != nil {
		t.Fatalf("a worker of a lane with an unreadable config: %v (want it to serve the lane's home partition)", err)
	} else if err := w.Close(a.ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.c.SetLaneSpread(a.ctx, "", model.LaneSpread{Spread: true}); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Fatalf("bad lane name: %v", err)
	}
}

// TestLaneSpreadInvalidation: a producer and a worker that read a lane's
// choice before it changed pick the change up once LaneSpreadTTL has
// passed on their clocks, not before.
func TestLaneSpreadInvalidation(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	lane := "lsi-" + model.NewUUID().String()[:8]
	prod, err := sdk.NewClient(b.ctx, sdk.ClientConfig{Backend: b.vc, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	home := b.vc.Partitions().SoloPartition(lane)
	if id, err := prod.CreateExecution(b.ctx, sdk.ExecutionSpec{Lane: lane}); err != nil || id.Partition() != home {
		t.Fatalf("before the change: %s, %v", id, err)
	}
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "lsi", Lanes: []string{lane}, Clock: clock, DisableNotifications: true})
	if got := w.SpreadPartitions(); len(got) != 0 {
		t.Fatalf("worker of a default lane reads spread partitions %v", got)
	}
	if err := b.c.SetLaneSpread(b.ctx, lane, model.LaneSpread{Spread: true, K: 4}); err != nil {
		t.Fatal(err)
	}
	advance(sdk.LaneSpreadTTL - time.Second)
	if id, err := prod.CreateExecution(b.ctx, sdk.ExecutionSpec{Lane: lane}); err != nil || id.Partition() != home {
		t.Fatalf("within the TTL: %s, %v (want the cached default)", id, err)
	}
	first, err := w.ClaimNext(b.ctx)
	if err != nil || first == nil {
		t.Fatalf("claim within the TTL: %v, %v", first, err)
	}
	if err := first.Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := w.SpreadPartitions(); len(got) != 0 {
		t.Fatalf("worker within the TTL reads spread partitions %v", got)
	}
	advance(2 * time.Second)
	seen := map[model.Partition]bool{}
	for range 40 {
		id, err := prod.CreateExecution(b.ctx, sdk.ExecutionSpec{Lane: lane})
		if err != nil {
			t.Fatal(err)
		}
		seen[id.Partition()] = true
	}
	if len(seen) < 2 {
		t.Fatalf("after the TTL 40 executions on %v, want the lane's 4 spread partitions", seen)
	}
	claimed := 1
	for range 50 {
		l, err := w.ClaimNext(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l == nil {
			break
		}
		claimed++
		if err := l.Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.SpreadPartitions(); len(got) != 4 || !slices.Contains(got, home) {
		t.Fatalf("worker after the TTL reads %v, want the lane's 4 partitions", got)
	}
	if claimed != 42 {
		t.Fatalf("worker claimed %d of 42 (before and after the change)", claimed)
	}
}
