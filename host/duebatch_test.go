package host_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// TestDueBatchPromotesPartitionsInOneCall: the real delayed_promoter scans
// a sweep's partitions together (pdk.DueBatch under
// abi.PartitionWholeBatch): executions due on several partitions are all
// promoted by one plugin call, each partition's record counting its own
// promotion, in fewer host calls than partitions scanned, and a
// not-yet-due one is left.
func TestDueBatchPromotesPartitionsInOneCall(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, timers: host.TimerConfig{Disabled: true},
		plugins: map[string]host.PluginConfig{"delayed_promoter": {Interval: 500 * time.Millisecond}}})
	copyFile(t, fixture(t, "delayed_promoter"), filepath.Join(b.dir, "delayed_promoter.wasm"))
	c := b.backend(t)
	ctx := context.Background()
	now, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := func(part uint16, delayUntil int64) model.ExecutionID {
		return b.createDelayed(t, ctx, part, delayUntil)
	}
	// Due before the first sweep can run (the host starts after they are
	// created), on the test host's partitions, which one call holds together.
	due := []model.ExecutionID{create(1, now+300), create(2, now+300), create(3, now+300), create(3, now+301)}
	later := create(0, now+3_600_000)
	for _, id := range append(due, later) {
		if core, err := c.ExecutionCore(ctx, id); err != nil || core["eligibility_state"] != "not_eligible_until_time" {
			t.Fatalf("%s not created delayed: %v %v", id, core, err)
		}
	}
	valkeytest.Eventually(t, 10*time.Second, "the delays pass", func() bool {
		t, err := c.ServerTime(ctx)
		return err == nil && t > now+400
	})
	b.start(t)
	for _, id := range due {
		valkeytest.Eventually(t, 30*time.Second, string(id)+" promoted", func() bool {
			return in(t, c, model.KeysOn(id.Partition()).LaneEligible("default"), id)
		})
		if in(t, c, model.KeysOn(id.Partition()).LaneDelayed("default"), id) {
			t.Fatalf("%s still in its delayed index", id)
		}
	}
	if !in(t, c, model.KeysOn(later.Partition()).LaneDelayed("default"), later) {
		t.Fatal("the not-yet-due execution left its delayed index")
	}
	acted := map[int]uint32{}
	var start time.Time
	for _, r := range b.host.Records("delayed_promoter") {
		if r.Result.Acted == 0 {
			continue
		}
		if r.Error != "" {
			t.Fatalf("record %+v", r)
		}
		if start.IsZero() {
			start = r.Start
		}
		if !r.Start.Equal(start) {
			t.Fatalf("promotions in more than one call: %+v", b.host.Records("delayed_promoter"))
		}
		acted[r.Partition] += r.Result.Acted
	}
	if len(acted) != 3 || acted[1] != 1 || acted[2] != 1 || acted[3] != 2 {
		t.Fatalf("acted per partition %v, want 1:1 2:1 3:2", acted)
	}
	st, _ := b.host.Plugin("delayed_promoter")
	if st.Faults != 0 || st.Denied != 0 || st.Totals.Errors != 0 {
		t.Fatalf("status %+v", st)
	}
	// Scanned one by one, a partition costs at least three host calls
	// (select it, read the clock, read its index); together, a call's
	// partitions share one of each (and its FCALL batch).
	if st.HostCalls >= 2*st.Calls {
		t.Fatalf("%d host calls for %d partition scans: the partitions were not scanned together", st.HostCalls, st.Calls)
	}
}
