package host_test

import (
	"maps"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// TestTimersBudgetPerSweep: a plugin on due-time timers starts a new
// budget sweep every interval, as one on fixed polling does (both loops
// begin their cycles in one place). Its per-sweep host-call budget holds
// four scans of every partition, so a loop that never restarted the count
// would be quarantined over budget within a few intervals.
func TestTimersBudgetPerSweep(t *testing.T) {
	t.Parallel()
	policy := fixturePolicy(t)
	g := policy.Plugins["delayed_promoter"]
	policy.Plugins = maps.Clone(policy.Plugins)
	// Calibrated below: the budget must hold one sweep of the plugin.
	g.HostCallsPerSweep = 1 << 20
	policy.Plugins["delayed_promoter"] = g
	interval := 50 * time.Millisecond
	plugins := map[string]host.PluginConfig{"delayed_promoter": {Interval: interval}}
	// SafetyFactor 1: every partition is polled every interval.
	timers := host.TimerConfig{SafetyFactor: 1}

	// Host calls per partition scan, measured on a host with room to
	// spare.
	b := setup(t, setupOpts{fixtures: []string{"delayed_promoter"}, store: true, plugins: plugins, timers: timers, policy: policy})
	var perScan int64
	valkeytest.Eventually(t, 30*time.Second, "ten sweeps", func() bool {
		st, _ := b.host.Plugin("delayed_promoter")
		if st.Cycles < 10 || st.Calls == 0 {
			return false
		}
		perScan = (st.HostCalls + st.Calls - 1) / st.Calls
		return true
	})
	b.host.Stop()

	// Room for every partition scanned four times in one sweep (once per
	// interval, plus wake-ups): far more than a sweep needs, far less than
	// the whole test spends.
	g.HostCallsPerSweep = 4 * 4 * perScan
	policy.Plugins["delayed_promoter"] = g
	b = setup(t, setupOpts{fixtures: []string{"delayed_promoter"}, store: true, plugins: plugins, timers: timers, policy: policy})
	valkeytest.Eventually(t, 60*time.Second, "four budgets spent on the tight budget, or a fault", func() bool {
		st, _ := b.host.Plugin("delayed_promoter")
		return st.Faults > 0 || st.HostCalls > 4*g.HostCallsPerSweep
	})
	if st, _ := b.host.Plugin("delayed_promoter"); st.Faults != 0 || st.OverBudget != 0 || st.State != host.StateRunning {
		t.Fatalf("state %s, faults %d, over budget %d (reason %q): the per-sweep budget was not restarted", st.State, st.Faults, st.OverBudget, st.Reason)
	}
}
