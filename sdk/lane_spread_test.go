package sdk_test

import (
	"errors"
	"testing"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestLaneSpreadChoice: a lane's choice is stored in its configuration
// hash where every producer reads it; a producer caches it (a change by
// another producer is not seen until LaneSpreadTTL), its own change takes
// effect at once; idempotent enqueues of a spread lane find the first
// execution; a default lane stays on FlowFabric's partition; a bad stored
// value fails the enqueue instead of placing the execution elsewhere.
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
	if err := a.c.SetLaneSpread(a.ctx, "", model.LaneSpread{Spread: true}); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Fatalf("bad lane name: %v", err)
	}
}
