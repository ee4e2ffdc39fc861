package host

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/model"
)

// emptyStore answers every read with nothing, so benchmarks measure the
// host and the ABI, not Valkey.
type emptyStore struct{}

func (emptyStore) FCallBatch(_ context.Context, calls []abi.Call) []abi.CallResult {
	out := make([]abi.CallResult, len(calls))
	for i := range out {
		out[i] = abi.CallResult{Status: "OK"}
	}
	return out
}
func (emptyStore) HMGet(_ context.Context, _ string, f []string) ([]abi.Field, error) {
	return make([]abi.Field, len(f)), nil
}
func (emptyStore) ZRangeByScore(context.Context, abi.ZRangeRequest) (abi.Members, error) {
	return abi.Members{}, nil
}
func (emptyStore) SMembers(context.Context, string) ([]string, error) { return nil, nil }

// ReadBatch answers every read of a batch with nothing (an empty index,
// an absent key), as an idle deployment would.
func (emptyStore) ReadBatch(_ context.Context, ops []abi.ReadOp) []abi.ReadResult {
	return make([]abi.ReadResult, len(ops))
}
func (emptyStore) SScan(context.Context, abi.ScanCursorRequest) (abi.ScanCursorResponse, error) {
	return abi.ScanCursorResponse{Cursor: "0"}, nil
}

func benchFixture(b testing.TB, name string) string {
	b.Helper()
	for _, p := range []string{filepath.Join("..", "testdata", "plugins", name+".wasm"), filepath.Join("..", "bin", "plugins", name+".wasm")} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	b.Fatalf("fixture %s.wasm is missing: run `make plugins` first", name)
	return ""
}

func benchLoader(b testing.TB, cache wazero.CompilationCache) loaderConfig {
	b.Helper()
	cfg, err := (Config{PluginDir: os.TempDir(), Store: emptyStore{}, Now: func(context.Context) (int64, error) { return 1_000_000, nil }}).withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	lc := newLoaderConfig(cache, cfg.Store, cfg.Now, cfg, func(string) PluginConfig { return PluginConfig{} })
	lc.grant = nil // fixtures run as they request (their grants are not the stock policy's concern here)
	return lc
}

func benchCache(b testing.TB) wazero.CompilationCache {
	b.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	c, err := wazero.NewCompilationCacheWithDir(filepath.Join(base, "fabric", "wazero"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func benchModule(b *testing.B, name string) (*Module, *hostfn.Caller) {
	b.Helper()
	return benchModuleOn(b, name, nil, "{fp:0}")
}

// benchModuleOn loads fixture name with its host functions over store
// (nil: benchLoader's emptyStore) at the server time 1,000,000 ms, and a
// caller on partition tag ("" for none).
func benchModuleOn(b *testing.B, name string, store hostfn.Store, tag string) (*Module, *hostfn.Caller) {
	b.Helper()
	lc := benchLoader(b, benchCache(b))
	if store != nil {
		lc.fns = hostfn.Functions(hostfn.Config{Store: store, Now: func(context.Context) (int64, error) { return 1_000_000, nil }})
	}
	m, err := loadModule(context.Background(), benchFixture(b, name), lc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(context.Background()) })
	man := m.Manifest()
	caller := &hostfn.Caller{Plugin: man.Name, Version: man.Version, Caps: &man.Capabilities, Tag: tag, Stats: &hostfn.Stats{}, Logger: benchLogger()}
	return m, caller
}

func scanInput(batch uint32) []byte {
	req := abi.ScanRequest{Cycle: 1, Partition: model.Partition{Family: model.FamilyFlow}, Partitions: 256, BatchSize: batch, DeadlineMs: 5000}
	b, _ := req.MarshalBinary()
	return b
}

func benchCall(b *testing.B, m *Module, caller *hostfn.Caller, export string, in []byte) {
	b.Helper()
	benchCallChecked(b, m, caller, export, in, nil)
}

// benchCallChecked is benchCall that decodes every call's ScanResult and
// fails on check's error (check nil: the output is not decoded).
func benchCallChecked(b *testing.B, m *Module, caller *hostfn.Caller, export string, in []byte, check func(abi.ScanResult) error) {
	b.Helper()
	ctx := context.Background()
	cpu := processCPU()
	for b.Loop() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := m.call(cctx, export, in, caller, nil)
		cancel()
		if err == nil && check != nil {
			var res abi.ScanResult
			if err = res.UnmarshalBinary(out); err == nil {
				err = check(res)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	// CPU time is steadier than ns/op on a shared machine; it includes
	// the GC's background work the calls caused.
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
}

// processCPU is the process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScanEmpty is the per-call overhead of one partition call that
// does nothing: timeout context, pool, Extism call, codec.
func BenchmarkScanEmpty(b *testing.B) {
	m, caller := benchModule(b, "swap_v1")
	benchCall(b, m, caller, abi.ExportScan, scanInput(50))
}

// BenchmarkDelayedPromoterIdle is one idle partition scan of the real
// scanner (clock + one empty index read) over an in-memory store; compare
// with BenchmarkScanNative in plugins/scanners/delayed_promoter.
func BenchmarkDelayedPromoterIdle(b *testing.B) {
	m, caller := benchModule(b, "delayed_promoter")
	benchCall(b, m, caller, abi.ExportScan, scanInput(50))
}

// BenchmarkDelayedPromoterIdleBatch is BenchmarkDelayedPromoterIdle for 32
// partitions in one fabric_scan_batch call; see the us/partition metric.
func BenchmarkDelayedPromoterIdleBatch(b *testing.B) {
	m, caller := benchModule(b, "delayed_promoter")
	req := abi.ScanBatchRequest{Cycle: 1, Family: model.FamilyFlow, Partitions: 256, BatchSize: 50, DeadlineMs: 5000}
	caller.Batch = map[uint16]string{}
	for i := range uint16(32) {
		req.Indexes = append(req.Indexes, i)
		caller.Batch[i] = model.Partition{Family: model.FamilyFlow, Index: i}.Tag()
	}
	in, _ := req.MarshalBinary()
	start := time.Now()
	benchCall(b, m, caller, abi.ExportScanBatch, in)
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N*32), "us/partition")
}

// BenchmarkHostFunctionRoundTrip is one guest-to-host call (now), measured
// as a scan making 1000 of them; see the ns/host_call metric.
func BenchmarkHostFunctionRoundTrip(b *testing.B) {
	m, caller := benchModule(b, "bench")
	start := time.Now()
	benchCall(b, m, caller, abi.ExportScan, scanInput(1000))
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*1000), "ns/host_call")
}

// BenchmarkCompile compares a cold compile with a compilation-cache hit.
func BenchmarkCompile(b *testing.B) {
	path := benchFixture(b, "healthy")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Cold", func(b *testing.B) {
		for b.Loop() {
			cache := wazero.NewCompilationCache()
			m, err := compileModule(context.Background(), data, "", abi.DefaultMaxPages, benchLoader(b, cache))
			if err != nil {
				b.Fatal(err)
			}
			m.Close(context.Background())
			cache.Close(context.Background())
		}
	})
	b.Run("Cached", func(b *testing.B) {
		lc := benchLoader(b, benchCache(b))
		m, err := compileModule(context.Background(), data, "", abi.DefaultMaxPages, lc) // warm the cache
		if err != nil {
			b.Fatal(err)
		}
		m.Close(context.Background())
		for b.Loop() {
			m, err := compileModule(context.Background(), data, "", abi.DefaultMaxPages, lc)
			if err != nil {
				b.Fatal(err)
			}
			m.Close(context.Background())
		}
	})
}

// BenchmarkInstanceMemory reports the Go heap one warm instance holds
// (its linear memories live on the Go heap) and the time to make one.
func BenchmarkInstanceMemory(b *testing.B) {
	m, caller := benchModule(b, "healthy")
	ctx := context.Background()
	in := scanInput(50)
	var insts []*instance
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		inst, err := m.newInstance(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.callInstance(ctx, inst, abi.ExportScan, in, caller); err != nil {
			b.Fatal(err)
		}
		insts = append(insts, inst)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(insts))/(1<<20), "MiB/instance")
	for _, inst := range insts {
		inst.close(ctx)
	}
}

func benchLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// BenchmarkColdCall is the cost of a call on a plugin whose instance was
// released and whose machine code pages were dropped (Module.releaseIdle):
// instantiate, the guest's runtime initialisation, the call, with the code
// faulted back from the page cache; trimmed-warm is a warm instance's call
// after its code pages were dropped (codeTrimInterval).
func BenchmarkColdCall(b *testing.B) {
	for _, v := range []struct {
		name    string
		release bool
	}{{"delayed_promoter", true}, {"unblock", true}, {"delayed_promoter/trimmed-warm", false}} {
		name := strings.TrimSuffix(v.name, "/trimmed-warm")
		b.Run(v.name, func(b *testing.B) {
			lc := benchLoader(b, benchCache(b))
			lc.codeDir = b.TempDir()
			m, err := loadModule(context.Background(), benchFixture(b, name), lc)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { m.Close(context.Background()) })
			man := m.Manifest()
			caller := &hostfn.Caller{Plugin: man.Name, Version: man.Version, Caps: &man.Capabilities, Tag: "{fp:0}", Stats: &hostfn.Stats{}, Logger: benchLogger()}
			ctx := context.Background()
			in := scanInput(50)
			cpu := processCPU()
			for b.Loop() {
				if v.release {
					m.mu.Lock()
					pool := m.pool
					m.pool = nil
					m.mu.Unlock()
					for _, inst := range pool {
						inst.close(ctx)
					}
				}
				trimCode(m.codeKey)
				if _, err := m.call(ctx, abi.ExportScan, in, caller, nil); err != nil {
					b.Fatal(err)
				}
				m.warms.Wait()
			}
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
