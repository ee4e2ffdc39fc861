package main

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// BenchmarkCycleNativeValkey is one full cycle of the promoter over every
// flow partition, compiled natively and run through host.NativeHost
// against the server at $FABRIC_BENCH_VALKEY_URL (database
// $FABRIC_BENCH_VALKEY_DB): the native side of scenario 5 of `make bench`,
// which starts the server and compares it with the wasm plugin's cycle in
// the host. Skipped without the URL.
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
	h := host.NewNativeHost(ctx, vc, nil)
	parts := vc.Partitions().Flow
	var cycle uint64
	for b.Loop() {
		cycle++
		for i := uint16(0); i < parts; i++ {
			Plugin.Scan(h, abi.ScanRequest{Cycle: cycle, Partition: model.Partition{Family: model.FamilyFlow, Index: i},
				Partitions: parts, BatchSize: Plugin.Manifest.BatchSize, DeadlineMs: Plugin.Manifest.TimeoutMs})
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/cycle")
}
