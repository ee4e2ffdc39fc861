package host_test

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// TestPluginErrorIsNotATrap: a plugin that returns an error of its own
// is quarantined as "plugin error", with its message, never as a trap.
func TestPluginErrorIsNotATrap(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixtures: []string{"plugerr"}})
	st := waitQuarantined(t, b, "swapper")
	if st.Fault != host.FaultPluginError || !strings.HasPrefix(st.Reason, "plugin error: ") ||
		!strings.Contains(st.Reason, "misconfigured on purpose") || strings.Contains(st.Reason, "trap") {
		t.Fatalf("fault %q, reason %q: want a plugin error with its message, not a trap", st.Fault, st.Reason)
	}
	if st.FaultKinds[host.FaultPluginError] < 1 || st.FaultKinds[host.FaultTrap] != 0 {
		t.Fatalf("fault kinds %v", st.FaultKinds)
	}
}

// TestFixedVersionCleanRecord quarantines a broken version under an hour
// of backoff, then writes the fixed one over it: the fix starts with a
// clean record, its first call within one interval of the swap rather
// than after the old version's backoff (the interval is long, so that
// "within one interval" is a wide margin on a loaded machine).
func TestFixedVersionCleanRecord(t *testing.T) {
	t.Parallel()
	prewarm(t, "plugerr", "swap_v1")
	const interval = time.Minute
	b := setup(t, setupOpts{fixtures: []string{"healthy"}, quarantine: time.Hour,
		plugins: map[string]host.PluginConfig{"swapper": {Interval: interval}}})
	target := filepath.Join(b.dir, "swapper.wasm")
	copyFile(t, fixture(t, "plugerr"), target)
	st := waitQuarantined(t, b, "swapper")
	if time.Until(st.QuarantineUntil) < 30*time.Minute {
		t.Fatalf("quarantined until %s: want the hour of backoff", st.QuarantineUntil)
	}
	copyFile(t, fixture(t, "swap_v1"), target)
	loaded := waitLoaded(t, b, "swapper")
	for loaded.Version != "1.0.0" {
		loaded = waitLoaded(t, b, "swapper")
	}
	if loaded.Version != "1.0.0" || loaded.State != host.StateRunning || loaded.Fault != "" {
		t.Fatalf("after the fix: %+v", loaded)
	}
	swapped := loaded.LastSwap
	var first host.CycleRecord
	valkeytest.Eventually(t, interval, "the fixed version's first call", func() bool {
		for _, r := range b.host.Records("swapper") {
			if r.Version == "1.0.0" {
				first = r
				return true
			}
		}
		return false
	})
	if first.Error != "" {
		t.Fatalf("the fixed version's first call failed: %s", first.Error)
	}
	if gap := first.Start.Sub(swapped); gap > interval {
		t.Fatalf("first call %s after the swap: want within one interval (%s), not the old backoff", gap, interval)
	}
	if st, _ := b.host.Plugin("swapper"); st.State != host.StateRunning || !st.QuarantineUntil.IsZero() {
		t.Fatalf("after the fixed version's first call: %+v", st)
	}
}

// TestHostCallBudget floods the host with host calls: the budget refuses
// them with abi.CodeBudget (the plugin sees and logs it), the call is an
// over-budget fault, and the counters show it; a healthy plugin beside it
// keeps its cadence.
func TestHostCallBudget(t *testing.T) {
	t.Parallel()
	policy := fixturePolicy(t)
	g := policy.Plugins["flood"]
	g.HostCallsPerSweep = 500
	policy.Plugins = maps.Clone(policy.Plugins)
	policy.Plugins["flood"] = g
	b := setup(t, setupOpts{fixtures: []string{"healthy", "flood"}, policy: policy})
	st := waitQuarantined(t, b, "flood")
	if st.Fault != host.FaultOverBudget || !strings.Contains(st.Reason, "host calls per sweep: budget of 500 spent") {
		t.Fatalf("fault %q, reason %q: want over budget", st.Fault, st.Reason)
	}
	if st.OverBudget < 1 || st.HostCalls < 500 {
		t.Fatalf("over budget %d, host calls %d", st.OverBudget, st.HostCalls)
	}
	valkeytest.Eventually(t, 30*time.Second, "the plugin saw its refusal", func() bool {
		return b.logs.Contains("flood refused: abi: " + abi.CodeBudget.String())
	})
	requireCadence(t, b, "healthy", 3)
}

// TestOffBackendPluginReleased: a Postgres plugin on a Valkey host is
// listed disabled with the reason, and its compiled code and instance are
// released (it can never run here; before, each such plugin held tens of
// MiB for nothing).
func TestOffBackendPluginReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixtures: []string{"sqltrap"}})
	st := waitLoaded(t, b, "sqltrap")
	if st.State != host.StateDisabled || !strings.Contains(st.Reason, "needs Postgres") || !st.Released {
		t.Fatalf("sqltrap on Valkey: state %s, reason %q, released %v", st.State, st.Reason, st.Released)
	}
}

// TestOffBackendPluginNotCompiled: a Valkey host reads the manifest of a
// plugin whose imports are Postgres's without compiling it (a cold
// compile of a Go plugin takes seconds; the stock set has 12 such): the
// plugin is listed as before, and its empty compilation cache stays empty.
func TestOffBackendPluginNotCompiled(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	b := setup(t, setupOpts{fixtures: []string{"sqltrap"}, cacheDir: cache})
	st := waitLoaded(t, b, "sqltrap")
	if st.State != host.StateDisabled || !strings.Contains(st.Reason, "needs Postgres") || !st.Released || st.Version == "" {
		t.Fatalf("sqltrap on Valkey: state %s, reason %q, released %v, version %q", st.State, st.Reason, st.Released, st.Version)
	}
	if backend, err := host.PluginBackend(fixture(t, "sqltrap")); err != nil || backend != host.BackendPostgres {
		t.Fatalf("PluginBackend(sqltrap) = %q, %v", backend, err)
	}
	if held, err := host.CacheHolds(cache, fixture(t, "sqltrap"), true); err != nil || held {
		t.Fatalf("sqltrap was compiled into the cache (%v, %v)", held, err)
	}
}
