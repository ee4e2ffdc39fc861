//go:build wasip1

package pdk

import (
	"runtime"
	"runtime/metrics"
)

// A plugin's call runs as one wasmexport call, and inside one call Go's
// garbage collector does not keep up: its background workers do not run
// until the call returns, so a sweep that reads a large keyspace page by
// page grows the heap until the plugin's memory cap stops it (the stock
// index_reconciler, over ~75,000 executions, ran out of its 64 MiB in one
// sweep; 1 GB of short-lived 1 KiB allocations in one call does too,
// where an explicit collection every 16 MiB keeps it under 16 MiB). The
// pdk therefore collects itself, at host calls, once gcEvery bytes were
// allocated since its last collection.

// gcEvery is how many bytes a call may allocate between collections:
// small against the smallest cap an operator grants (16 MiB with the
// runtime's own), large against a typical sweep, which collects never.
const gcEvery = 4 << 20

var (
	// gcAllocs reads the bytes allocated so far (cumulative).
	gcAllocs = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	// gcAtCollection is gcAllocs' reading at the last collection.
	gcAtCollection uint64
)

// collectIfGrown runs a collection when gcEvery bytes were allocated
// since the last one.
func collectIfGrown() {
	metrics.Read(gcAllocs)
	if gcAllocs[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	if a := gcAllocs[0].Value.Uint64(); a-gcAtCollection >= gcEvery {
		runtime.GC()
		gcAtCollection = a
	}
}
