package host_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// TestDelayedPromoterOnValkey loads the real delayed_promoter .wasm and
// lets it act on a real redis-server database: executions created delayed
// by ff_create_execution are promoted by the plugin once due, and not
// before.
func TestDelayedPromoterOnValkey(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, plugins: map[string]host.PluginConfig{
		"delayed_promoter": {Interval: 100 * time.Millisecond},
	}})
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
	// Both become due while the host runs; they must still be delayed
	// when it starts. (A DelayUntil already in the past is not a delay:
	// ff_create_execution then makes the execution eligible at once.)
	soon := create(2, now+800)       // due 800 ms from now
	due := create(1, now+600)        // due 600 ms from now
	later := create(3, now+3600_000) // due in an hour
	for _, id := range []model.ExecutionID{soon, due, later} {
		core, err := c.ExecutionCore(ctx, id)
		if err != nil || core["eligibility_state"] != "not_eligible_until_time" {
			t.Fatalf("%s was not created delayed (creating took too long?): %v %v", id, core, err)
		}
	}
	b.start(t)

	for _, id := range []model.ExecutionID{due, soon} {
		valkeytest.Eventually(t, 30*time.Second, string(id)+" promoted", func() bool {
			core, err := c.ExecutionCore(ctx, id)
			return err == nil && core["eligibility_state"] == "eligible_now" && !in(t, c, model.KeysOn(id.Partition()).LaneDelayed("default"), id)
		})
		keys := model.KeysOn(id.Partition())
		if in(t, c, keys.LaneDelayed("default"), id) || !in(t, c, keys.LaneEligible("default"), id) {
			t.Fatalf("%s: in delayed %v, in eligible %v", id, in(t, c, keys.LaneDelayed("default"), id), in(t, c, keys.LaneEligible("default"), id))
		}
	}
	promotedAt, err := c.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if promotedAt < now+800 {
		t.Fatalf("the delayed execution was promoted before its delay_until")
	}
	core, err := c.ExecutionCore(ctx, later)
	if err != nil || core["eligibility_state"] != "not_eligible_until_time" || !in(t, c, model.KeysOn(later.Partition()).LaneDelayed("default"), later) {
		t.Fatalf("not-yet-due execution was touched: %v %v", core, err)
	}
	// The promotions land in Valkey before their calls return and are
	// counted, so wait for the counts.
	valkeytest.Eventually(t, 30*time.Second, "two promotions counted", func() bool {
		st, _ := b.host.Plugin("delayed_promoter")
		return st.Totals.Acted >= 2
	})
	if st, _ := b.host.Plugin("delayed_promoter"); st.Faults != 0 || st.Denied != 0 {
		t.Fatalf("status = %+v", st)
	}
}

// in reports whether id is a member of the sorted set key.
func in(t *testing.T, c *valkey.Client, key string, id model.ExecutionID) bool {
	t.Helper()
	raw := c.Raw()
	_, err := raw.Do(context.Background(), raw.B().Zscore().Key(key).Member(string(id)).Build()).AsFloat64()
	if err != nil && !valkeygo.IsValkeyNil(err) {
		t.Fatalf("ZSCORE %s: %v", key, err)
	}
	return err == nil
}

// TestCapabilities: a call outside the grant is refused, counted, and the
// plugin is told why; the plugin is not quarantined for it.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixtures: []string{"ungranted"}, store: true})
	valkeytest.Eventually(t, 30*time.Second, "refusals counted", func() bool {
		st, _ := b.host.Plugin("ungranted")
		return st.Denied >= 3 && st.Calls >= 1
	})
	st, _ := b.host.Plugin("ungranted")
	if st.State != host.StateRunning || st.Faults != 0 {
		t.Fatalf("a refusal must not quarantine: %+v", st)
	}
	if st.Totals.Errors < 3 {
		t.Fatalf("the plugin did not see its refusals as errors: %+v", st.Totals)
	}
	for _, want := range []string{
		// what the plugin was told, as it logged it
		"fcall refused: abi: denied: fcall ff_promote_delayed is not granted (capabilities.fcall: [ff_version])",
		"read refused: abi: denied: read of ff:idx:{fp:0}:all_executions is not granted",
		// partition 0's scan may not read partition 1's key, although the
		// same batch call scans partition 1 too
		"cross-partition read refused: abi: cross_partition",
		// what the host logged
		"plugin host call refused",
	} {
		valkeytest.Eventually(t, 30*time.Second, "log mentions "+want, func() bool { return b.logs.Contains(want) })
	}
}
