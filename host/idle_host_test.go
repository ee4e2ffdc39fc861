package host_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// TestIdleReleaseHost: a host releases the instance of a plugin idle
// between its sweeps (/plugins shows instances 0 and counts the release),
// the sweeps after a release still run without a fault, and a plugin
// pinned warm (PluginConfig.IdleRelease < 0) keeps its instance.
func TestIdleReleaseHost(t *testing.T) {
	b := setup(t, setupOpts{fixtures: []string{"healthy", "swap_v1"}, idleRelease: 150 * time.Millisecond,
		plugins: map[string]host.PluginConfig{
			"healthy": {Interval: 1500 * time.Millisecond},
			"swapper": {Interval: 1500 * time.Millisecond, IdleRelease: -1},
		}})
	st := func(name string) host.PluginStatus {
		s, ok := b.host.Plugin(name)
		if !ok {
			t.Fatalf("plugin %s not loaded", name)
		}
		return s
	}
	valkeytest.Eventually(t, 30*time.Second, "healthy released idle", func() bool {
		s := st("healthy")
		return s.Instances == 0 && s.IdleReleases >= 1
	})
	calls := st("healthy").Calls
	valkeytest.Eventually(t, 30*time.Second, "healthy sweeps again after the release, then is released again", func() bool {
		s := st("healthy")
		return s.Calls >= calls+4 && s.IdleReleases >= 2 && s.Instances == 0
	})
	if s := st("healthy"); s.Faults != 0 || s.IdleReleaseMs != 150 || int64(s.Totals.Scanned) < s.Calls {
		t.Fatalf("healthy after releases: faults %d, idle_release_ms %d, scanned %d of %d calls", s.Faults, s.IdleReleaseMs, s.Totals.Scanned, s.Calls)
	}
	if s := st("swapper"); s.Instances != 1 || s.IdleReleases != 0 || s.IdleReleaseMs != 0 || s.Calls == 0 {
		t.Fatalf("pinned swapper: instances %d, idle releases %d, idle_release_ms %d, calls %d; want 1, 0, 0, > 0", s.Instances, s.IdleReleases, s.IdleReleaseMs, s.Calls)
	}
}
