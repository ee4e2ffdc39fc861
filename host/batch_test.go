package host_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// A plugin that exports fabric_scan_batch has a sweep's partitions scanned
// in one call (one record per partition, sharing the call's start);
// PartitionsPerCall 1 goes back to one call per partition.
func TestSweepScansSeveralPartitionsPerCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		perCall   int
		wantCalls int // distinct call starts in cycle 2
	}{
		{"Batched", 0, 1},
		{"TwoPerCall", 2, 2},
		{"OnePerCall", 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{fixtures: []string{"healthy"}, perCall: tc.perCall})
			valkeytest.Eventually(t, 30*time.Second, "healthy completes two sweeps", func() bool {
				return b.callsOf("healthy") >= 8
			})
			starts := map[time.Time]bool{}
			parts := map[int]bool{}
			for _, r := range b.host.Records("healthy") {
				if r.Cycle != 2 {
					continue
				}
				if r.Error != "" || r.Result.Scanned != 1 {
					t.Fatalf("record %+v", r)
				}
				starts[r.Start] = true
				parts[r.Partition] = true
			}
			if len(parts) != 4 || len(starts) != tc.wantCalls {
				t.Fatalf("cycle 2: partitions %v in %d calls, want 4 in %d", parts, len(starts), tc.wantCalls)
			}
			st, _ := b.host.Plugin("healthy")
			if st.State != host.StateRunning || st.Faults != 0 || st.Metrics["scans"] < 8 {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// PartitionsPerCall beyond the ABI's bound is refused up front.
func TestPartitionsPerCallIsValidated(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 1025} {
		if _, err := host.New(host.Config{PluginDir: t.TempDir(), PartitionsPerCall: n}); err == nil {
			t.Errorf("PartitionsPerCall %d accepted", n)
		}
	}
}
