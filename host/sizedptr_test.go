package host_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// A plugin built for ABI 1.1 sends unsized pointers and reads unsized
// results; the ABI 1.2 host still serves it.
func TestABI11PluginWithUnsizedPointers(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, fixtures: []string{"legacyptr"}})
	c := b.backend(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	key := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 2}).LaneDelayed("default")
	raw := c.Raw()
	if err := raw.Do(ctx, raw.B().Zadd().Key(key).ScoreMember().ScoreMember(1, "a").ScoreMember(2, "b").ScoreMember(3, "c").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	valkeytest.Eventually(t, 30*time.Second, "legacyptr reads partition 2's three members", func() bool {
		for _, r := range b.host.Records("legacyptr") {
			if r.Partition == 2 && r.Error == "" && r.Result.Scanned == 3 {
				return true
			}
		}
		return false
	})
	st, _ := b.host.Plugin("legacyptr")
	if st.ABI != "1.1.0" || st.Faults != 0 || st.State != host.StateRunning {
		t.Fatalf("status = %+v", st)
	}
}

// A sized pointer whose length runs past kernel memory is an ABI
// violation: the plugin is quarantined, its neighbour keeps its cadence.
func TestSizedPointerPastKernelMemoryIsAFault(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, fixtures: []string{"healthy", "legacyptr"},
		plugins: map[string]host.PluginConfig{"legacyptr": {Config: map[string]string{"lie": "1"}}}})
	st := waitQuarantined(t, b, "legacyptr")
	if !strings.Contains(st.Reason, "abi violation") || !strings.Contains(st.Reason, "out of kernel memory") {
		t.Fatalf("reason %q", st.Reason)
	}
	requireCadence(t, b, "healthy", 3)
}
