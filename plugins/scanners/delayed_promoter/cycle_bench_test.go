package main

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/internal/nativehost"
)

// BenchmarkCycleNativeValkey is one full cycle of the promoter over 256
// flow partitions compiled natively, against the server at
// $FABRIC_BENCH_VALKEY_URL (database $FABRIC_BENCH_VALKEY_DB): the native
// side of scenario 5 of `make bench`, which starts the server and compares
// with the wasm plugin's cycle in the host. Skipped without the URL.
func BenchmarkCycleNativeValkey(b *testing.B) {
	url := os.Getenv("FABRIC_BENCH_VALKEY_URL")
	if url == "" {
		b.Skip("FABRIC_BENCH_VALKEY_URL is not set (run by cmd/fabric-bench)")
	}
	db, _ := strconv.Atoi(os.Getenv("FABRIC_BENCH_VALKEY_DB"))
	ctx := context.Background()
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, DB: db})
	if err != nil {
		b.Fatal(err)
	}
	defer vc.Close()
	h := &nativehost.Host{Ctx: ctx, Store: hostfn.ValkeyStore{C: vc}, NowMs: vc.ServerTime,
		Manifest: Plugin.Manifest, Values: map[string]string{"lanes": os.Getenv("FABRIC_BENCH_LANES")}}
	parts := int(vc.Partitions().Flow)
	var cycle uint64
	for b.Loop() {
		cycle++
		h.Cycle(Plugin, parts, cycle)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/cycle")
}
