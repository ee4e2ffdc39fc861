package host_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/lua"
	"github.com/fabric-host/fabric/model"
)

// TestDelayedPromoterOnValkey loads the real delayed_promoter .wasm and
// lets it act on a real redis-server database.
func TestDelayedPromoterOnValkey(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, plugins: map[string]host.PluginConfig{
		"delayed_promoter": {Interval: 100 * time.Millisecond},
	}})
	copyFile(t, fixture(t, "delayed_promoter"), filepath.Join(b.dir, "delayed_promoter.wasm"))

	// Seed one due delayed execution on partition 2 with exactly the fields
	// ff_promote_delayed reads, through the host's own database.
	st := b.backend(t)
	ctx := context.Background()
	part := model.Partition{Family: model.FamilyFlow, Index: 2}
	id := model.NewExecutionID(part, model.NewUUID())
	keys := model.KeysOn(part)
	now, err := st.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := st.Raw()
	core := model.KeysFor(id).Core()
	if err := raw.Do(ctx, raw.B().Hset().Key(core).FieldValue().
		FieldValue("lifecycle_phase", "runnable").
		FieldValue("eligibility_state", "not_eligible_until_time").
		FieldValue("delay_until", strconv.FormatInt(now-1000, 10)).
		FieldValue("priority", "0").
		FieldValue("created_at", strconv.FormatInt(now-5000, 10)).
		FieldValue("lane_id", "default").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, raw.B().Zadd().Key(keys.LaneDelayed("default")).ScoreMember().ScoreMember(float64(now-1000), string(id)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b.start(t)

	if strings.Contains(lua.Source(), "ff_promote_delayed") {
		valkeytest.Eventually(t, 10*time.Second, "the execution is promoted to eligible", func() bool {
			score, err := raw.Do(ctx, raw.B().Zscore().Key(keys.LaneEligible("default")).Member(string(id)).Build()).AsFloat64()
			_ = score
			return err == nil
		})
		n, _ := raw.Do(ctx, raw.B().Zcard().Key(keys.LaneDelayed("default")).Build()).AsInt64()
		if n != 0 {
			t.Fatalf("delayed index still holds %d ids", n)
		}
		state, _ := raw.Do(ctx, raw.B().Hget().Key(core).Field("eligibility_state").Build()).ToString()
		if state != "eligible_now" {
			t.Fatalf("eligibility_state = %q, want eligible_now", state)
		}
		return
	}
	// ff_promote_delayed is not in this branch's library yet (branch
	// lua-sched): the plugin must still find the due id in the real index
	// and drive the FCALL, which the server refuses; after 3 failures the
	// host's failure tracker skips the id.
	t.Log("ff_promote_delayed is not loaded yet: asserting the scan reached the server, not the promotion")
	valkeytest.Eventually(t, 20*time.Second, "due id scanned, FCALL attempted, then skipped by the failure tracker", func() bool {
		st, _ := b.host.Plugin("delayed_promoter")
		return st.Totals.Scanned >= 4 && st.Totals.Errors >= 3 && st.Totals.Skipped >= 1
	})
	if !b.logs.Contains("persistent FCALL failure") {
		t.Fatal("the failure tracker's backoff was not logged")
	}
}

// TestCapabilities: a call outside the grant is refused, counted, and the
// plugin is told why; the plugin is not quarantined for it.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixtures: []string{"ungranted"}, store: true})
	valkeytest.Eventually(t, 10*time.Second, "refusals counted", func() bool {
		st, _ := b.host.Plugin("ungranted")
		return st.Denied >= 2 && st.Calls >= 1
	})
	st, _ := b.host.Plugin("ungranted")
	if st.State != host.StateRunning || st.Faults != 0 {
		t.Fatalf("a refusal must not quarantine: %+v", st)
	}
	if st.Totals.Errors < 2 {
		t.Fatalf("the plugin did not see its refusals as errors: %+v", st.Totals)
	}
	for _, want := range []string{
		// what the plugin was told, as it logged it
		"fcall refused: abi: denied: fcall ff_promote_delayed is not granted (capabilities.fcall: [ff_version])",
		"read refused: abi: denied: read of ff:idx:{fp:0}:all_executions is not granted",
		// what the host logged
		"plugin host call refused",
	} {
		valkeytest.Eventually(t, 5*time.Second, "log mentions "+want, func() bool { return b.logs.Contains(want) })
	}
}
