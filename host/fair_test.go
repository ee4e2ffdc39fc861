package host_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// TestProbationCut: once a plugin's call faulted, its next calls run on
// probation (behind every healthy call) and are cut sooner than its
// timeout; a healthy neighbour never runs on probation and keeps its
// cadence.
func TestProbationCut(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixtures: []string{"healthy", "loop30"}, probation: 100 * time.Millisecond,
		plugins: map[string]host.PluginConfig{"loop30": {Timeout: 1500 * time.Millisecond}}})
	st := waitQuarantined(t, b, "loop30")
	if !strings.Contains(st.Reason, "plugin.loop30.fabric_scan_batch after 1.5s") {
		t.Fatalf("first fault %q: want its own 1.5s timeout", st.Reason)
	}
	valkeytest.Eventually(t, 30*time.Second, "loop30 retried on probation", func() bool {
		st, _ := b.host.Plugin("loop30")
		return st.Faults >= 3
	})
	recs := b.host.Records("loop30")
	if len(recs) == 0 || recs[0].Cycle != 1 {
		t.Fatalf("loop30's records do not start with its first sweep: %+v", recs)
	}
	for _, r := range recs {
		if r.Cycle == 1 {
			if r.Probation {
				t.Errorf("loop30's first call ran on probation: %+v", r)
			}
			continue
		}
		if !r.Probation || !strings.Contains(r.Error, "timed out") ||
			!strings.Contains(r.Error, "on probation after") || !strings.Contains(r.Error, "of its 1.5s") {
			t.Errorf("loop30 call after a fault: probation %v, error %q; want cut on probation", r.Probation, r.Error)
		}
	}
	requireCadence(t, b, "healthy", 3)
	for _, r := range b.host.Records("healthy") {
		if r.Probation || r.Error != "" {
			t.Fatalf("healthy call ran on probation or failed: %+v", r)
		}
	}
}
