package host_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// prewarm compiles fixtures into the shared compilation cache, as
// `fabric plugins validate` does before a deploy, so the swap measures
// the host, not the first compile of a new binary.
func prewarm(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := host.Inspect(context.Background(), fixture(t, n), host.InspectConfig{CacheDir: cacheDir}); err != nil {
			t.Fatalf("prewarm %s: %v", n, err)
		}
	}
}

// TestHotSwap is not parallel, so the swap latency it logs is not the
// parallel tests' compile time. The latency target (≤1 s) is measured by
// `make bench`, not asserted here: a loaded CI machine may take longer,
// and what this test asserts is order and no missed or doubled cycle.
func TestHotSwap(t *testing.T) {
	t.Run("NoCycleSkippedOrRunTwice", func(t *testing.T) {
		prewarm(t, "swap_v1", "swap_v2")
		b := setup(t, setupOpts{fixtures: []string{"healthy"}})
		target := filepath.Join(b.dir, "swapper.wasm")
		copyFile(t, fixture(t, "swap_v1"), target)
		if st := waitLoaded(t, b, "swapper"); st.Version != "1.0.0" {
			t.Fatalf("loaded %s, want 1.0.0", st.Version)
		}
		waitCycles(t, b, "swapper", 3)

		// Alternate versions under load; each write is served, in order.
		versions := []string{"2.0.0", "1.0.0", "2.0.0", "1.0.0", "2.0.0"}
		for i, want := range versions {
			src := "swap_v1"
			if want == "2.0.0" {
				src = "swap_v2"
			}
			start := time.Now()
			copyFile(t, fixture(t, src), target)
			valkeytest.Eventually(t, 30*time.Second, "swapper "+want+" serves after its write", func() bool {
				st, _ := b.host.Plugin("swapper")
				return st.Version == want && st.Swaps == i+1
			})
			t.Logf("swap %d to %s served after %s", i+1, want, time.Since(start).Round(time.Millisecond))
			waitCycles(t, b, "swapper", 2)
		}

		recs := b.host.Records("swapper")
		requireExactCycles(t, recs, 4)
		// Versions change only at partition boundaries, in write order.
		var seq []string
		for _, r := range recs {
			if len(seq) == 0 || seq[len(seq)-1] != r.Version {
				seq = append(seq, r.Version)
			}
		}
		if want := append([]string{"1.0.0"}, versions...); len(seq) != len(want) {
			t.Fatalf("served versions %v, want %v", seq, want)
		}
		requireCadence(t, b, "healthy", 3)
	})

	t.Run("HalfWrittenFileNeverReplacesWorkingPlugin", func(t *testing.T) {
		prewarm(t, "swap_v2")
		b := setup(t, setupOpts{fixtures: []string{"healthy"}})
		target := filepath.Join(b.dir, "healthy.wasm")
		v2, err := os.ReadFile(fixture(t, "swap_v2"))
		if err != nil {
			t.Fatal(err)
		}
		// A writer that stalls halfway: the host sees a truncated file.
		if err := os.WriteFile(target, v2[:len(v2)/2], 0o644); err != nil {
			t.Fatal(err)
		}
		fs := b.sig.Rejected.WaitOrTimeout(t)
		if fs.Path != target || fs.State != host.StateInvalid {
			t.Fatalf("rejected = %+v", fs)
		}
		from := b.callsOf("healthy")
		valkeytest.Eventually(t, 30*time.Second, "healthy keeps serving after a bad write", func() bool {
			st, _ := b.host.Plugin("healthy")
			return st.State == host.StateRunning && st.Version == "1.0.0" && st.Calls > from+4
		})
		// The writer finishes: the complete file loads (a new plugin name,
		// so under its own file name: a file is named after its plugin).
		if err := os.WriteFile(filepath.Join(b.dir, "swapper.wasm"), v2, 0o644); err != nil {
			t.Fatal(err)
		}
		waitLoaded(t, b, "swapper")
	})
}

func waitLoaded(t *testing.T, b *testBundle, name string) host.PluginStatus {
	t.Helper()
	for {
		st := b.sig.Loaded.WaitOrTimeout(t)
		if st.Name == name {
			return st
		}
	}
}

// waitCycles waits until plugin name completed n more sweeps.
func waitCycles(t *testing.T, b *testBundle, name string, n uint64) {
	t.Helper()
	st, _ := b.host.Plugin(name)
	from := st.Cycles
	valkeytest.Eventually(t, 20*time.Second, name+" sweeps", func() bool {
		st, _ := b.host.Plugin(name)
		return st.Cycles > from+n
	})
}

// requireExactCycles checks that every sweep in recs (but the last, which
// may be in progress) ran each of the partitions exactly once, and that
// sweep numbers have no gap.
func requireExactCycles(t *testing.T, recs []host.CycleRecord, partitions int) {
	t.Helper()
	byCycle := map[uint64]map[int]int{}
	for _, r := range recs {
		if r.Error != "" {
			t.Fatalf("cycle %d partition %d failed: %s", r.Cycle, r.Partition, r.Error)
		}
		if byCycle[r.Cycle] == nil {
			byCycle[r.Cycle] = map[int]int{}
		}
		byCycle[r.Cycle][r.Partition]++
	}
	cycles := make([]uint64, 0, len(byCycle))
	for c := range byCycle {
		cycles = append(cycles, c)
	}
	sort.Slice(cycles, func(i, j int) bool { return cycles[i] < cycles[j] })
	for i, c := range cycles {
		if i > 0 && c != cycles[i-1]+1 {
			t.Fatalf("cycle %d follows %d: a sweep is missing", c, cycles[i-1])
		}
		if i == len(cycles)-1 {
			break
		}
		for p := 0; p < partitions; p++ {
			if n := byCycle[c][p]; n != 1 {
				t.Fatalf("cycle %d partition %d ran %d times, want exactly once", c, p, n)
			}
		}
	}
	t.Logf("%d sweeps checked, each partition exactly once", len(cycles)-1)
}
