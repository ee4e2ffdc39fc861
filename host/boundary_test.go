package host_test

import (
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/host"
)

// heapGrowth returns the bytes the Go heap allocated while f ran
// (cumulative: every allocation counts, freed or not). The tests using it
// are not parallel: parallel tests wait until they are done.
func heapGrowth(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestLyingReadBatchIsAFault: a plugin with the default grant sends
// read_batch an op count equal to the 16 MiB that follow it. The host
// refuses the request before allocating for it and the call ends as a
// bad-output fault naming the malformed request. The host allocates
// about the request's copies (the kernel block, the host's copy: 56 MiB
// measured with loading the module), not ~56 bytes per op claimed: on
// main no fault within 10 s (the plugin was answered bad_request and
// scanned again every sweep) and the test process peaked at 1.99 GB RSS
// (273 MB now).
func TestLyingReadBatchIsAFault(t *testing.T) {
	var st host.PluginStatus
	b := setup(t, setupOpts{fixtures: []string{"liebatch"}, noStart: true})
	grew := heapGrowth(func() {
		b.start(t)
		st = waitQuarantined(t, b, "liebatch")
	})
	if st.Fault != host.FaultBadOutput || !strings.Contains(st.Reason, "malformed request") || !strings.Contains(st.Reason, "exceeds") {
		t.Fatalf("fault %q, reason %q: want bad output naming the malformed request", st.Fault, st.Reason)
	}
	const bound = 128 << 20
	t.Logf("host heap allocated %d MiB up to the fault", grew>>20)
	if grew > bound {
		t.Fatalf("host heap allocated %d MiB serving a 16 MiB lie, above %d MiB", grew>>20, bound>>20)
	}
}

// TestKernelBlocksShareTheMemoryCap: a plugin holding 32 MiB of linear
// memory allocates 1 MiB kernel blocks (host-side memory) until stopped.
// Its blocks and its linear memory share its 64 MiB cap: it gets under
// 32 MiB of blocks (28 measured), the call ends over memory, and the host
// heap allocates 84 MiB up to the fault. On main the kernel had a cap of
// its own: 63 MiB of blocks beside the linear memory, 151 MiB allocated.
func TestKernelBlocksShareTheMemoryCap(t *testing.T) {
	const capMiB = 64
	var st host.PluginStatus
	b := setup(t, setupOpts{fixtures: []string{"kernelbomb"}, noStart: true})
	grew := heapGrowth(func() {
		b.start(t)
		st = waitQuarantined(t, b, "kernelbomb")
	})
	if st.Fault != host.FaultOverMemory || !strings.Contains(st.Reason, "out of memory") {
		t.Fatalf("fault %q, reason %q: want over memory", st.Fault, st.Reason)
	}
	blocks := 0
	for _, m := range regexp.MustCompile(`holding (\d+) MiB linear, (\d+) MiB blocks`).FindAllStringSubmatch(b.logs.Grep(1<<20, "kernelbomb: holding"), -1) {
		linear, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		blocks = max(blocks, n)
		if linear+n > capMiB {
			t.Fatalf("the plugin held %d MiB of linear memory and %d MiB of kernel blocks under a %d MiB cap", linear, n, capMiB)
		}
	}
	if blocks == 0 {
		t.Fatalf("the plugin logged no block; logs:\n%s", b.logs.Grep(20, "kernelbomb"))
	}
	t.Logf("%d MiB of blocks beside 32 MiB of linear memory; host heap allocated %d MiB up to the fault", blocks, grew>>20)
	// Cumulative: the blocks' arena grows by doubling (at most twice its
	// final capacity in copies) and loading the module takes ~20 MiB.
	if grew > 2*capMiB<<20 {
		t.Fatalf("host heap allocated %d MiB for a plugin capped at %d MiB, above twice the cap", grew>>20, capMiB)
	}
}
