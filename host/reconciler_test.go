package host_test

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// partitionDump returns DUMP of every key on partition p's hash tag, by
// key, to show a sweep wrote nothing there.
func partitionDump(t *testing.T, ctx context.Context, c *valkey.Client, p model.Partition) map[string]string {
	t.Helper()
	raw := c.Raw()
	keys, err := raw.Do(ctx, raw.B().Keys().Pattern("*"+p.Tag()+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if strings.HasPrefix(k, valkey.PartitionLeasePrefix) {
			continue // the host's own lease on the partition, not execution data
		}
		if out[k], err = raw.Do(ctx, raw.B().Dump().Key(k).Build()).ToString(); err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
	}
	return out
}

// TestIndexReconcilerRepairsOnValkey loads the index_reconciler .wasm
// (default mode, repair) over a real server: an eligible execution
// removed from its index and a delayed one moved into a wrong index are
// put back, each with the score the flowfabric functions gave it, and a
// consistent partition is left byte-identical through several sweeps.
func TestIndexReconcilerRepairsOnValkey(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, plugins: map[string]host.PluginConfig{
		"index_reconciler": {Interval: 100 * time.Millisecond}}})
	copyFile(t, fixture(t, "index_reconciler"), filepath.Join(b.dir, "index_reconciler.wasm"))
	f := &scannerFixture{testBundle: b, c: b.backend(t), ctx: valkeytest.Context(t, 2*time.Minute), t: t}
	on := func(i uint16) model.Partition { return model.Partition{Family: model.FamilyFlow, Index: i} }
	create := func(p model.Partition, params valkey.CreateExecutionParams) model.ExecutionID {
		params.ExecutionID = model.NewExecutionID(p, model.NewUUID())
		return f.create(&params)
	}
	score := func(key string, eid model.ExecutionID) (float64, bool) {
		raw := f.c.Raw()
		s, err := raw.Do(f.ctx, raw.B().Zscore().Key(key).Member(string(eid)).Build()).AsFloat64()
		return s, err == nil
	}
	raw := f.c.Raw()
	do := func(cmd interface{ Error() error }) {
		t.Helper()
		if err := cmd.Error(); err != nil {
			t.Fatal(err)
		}
	}

	// Partition 0: an eligible execution removed from its index.
	removed := create(on(0), valkey.CreateExecutionParams{Priority: 4})
	pk0 := model.KeysOn(on(0))
	removedScore, ok := score(pk0.LaneEligible("default"), removed)
	if !ok {
		t.Fatal("not created eligible")
	}
	do(raw.Do(f.ctx, raw.B().Zrem().Key(pk0.LaneEligible("default")).Member(string(removed)).Build()))

	// Partition 1: a delayed execution moved to the eligible index.
	moved := create(on(1), valkey.CreateExecutionParams{DelayUntil: f.now() + 3_600_000})
	pk1 := model.KeysOn(on(1))
	movedScore, ok := score(pk1.LaneDelayed("default"), moved)
	if !ok {
		t.Fatal("not created delayed")
	}
	do(raw.Do(f.ctx, raw.B().Zrem().Key(pk1.LaneDelayed("default")).Member(string(moved)).Build()))
	do(raw.Do(f.ctx, raw.B().Zadd().Key(pk1.LaneEligible("default")).ScoreMember().ScoreMember(1, string(moved)).Build()))

	// Partition 3: consistent executions in several states.
	create(on(3), valkey.CreateExecutionParams{Priority: 2})
	create(on(3), valkey.CreateExecutionParams{DelayUntil: f.now() + 3_600_000})
	done := create(on(3), valkey.CreateExecutionParams{})
	fence, _ := f.claim(done, "w-ir", 60_000, 0)
	if err := f.c.CompleteExecution(f.ctx, &valkey.CompleteExecutionParams{ExecutionID: done, Fence: fence}); err != nil {
		t.Fatal(err)
	}
	active := create(on(3), valkey.CreateExecutionParams{})
	f.claim(active, "w-ir", 3_600_000, 0)
	consistent := partitionDump(t, f.ctx, f.c, on(3))

	f.start(t)
	valkeytest.Eventually(t, 30*time.Second, "removed entry restored", func() bool {
		s, ok := score(pk0.LaneEligible("default"), removed)
		return ok && s == removedScore
	})
	valkeytest.Eventually(t, 30*time.Second, "moved entry put back", func() bool {
		s, ok := score(pk1.LaneDelayed("default"), moved)
		_, wrong := score(pk1.LaneEligible("default"), moved)
		return ok && s == movedScore && !wrong
	})
	st := f.waitActed("index_reconciler", 2)
	if st.Totals.Errors != 0 {
		t.Fatalf("status = %+v", st)
	}
	valkeytest.Eventually(t, 30*time.Second, "repair logged", func() bool {
		return f.logs.Contains("repaired the lane index of execution " + string(moved) + ": in delayed")
	})
	// Two more full sweeps: nothing more to repair, nothing written on the
	// consistent partition.
	calls := f.callsOf("index_reconciler")
	valkeytest.Eventually(t, 30*time.Second, "two more sweeps", func() bool { return f.callsOf("index_reconciler") >= calls+8 })
	if later, _ := f.host.Plugin("index_reconciler"); later.Totals.Acted != st.Totals.Acted {
		t.Fatalf("repairs counted again: %d then %d", st.Totals.Acted, later.Totals.Acted)
	}
	if after := partitionDump(t, f.ctx, f.c, on(3)); !maps.Equal(consistent, after) {
		t.Fatalf("the consistent partition changed: %d keys before, %d after", len(consistent), len(after))
	}
}
