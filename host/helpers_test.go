package host_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// cacheDir is the one compilation cache of this test binary: every test
// shares compiled fixtures, so each .wasm compiles at most once per run.
// It is the CLI's cache (~/.cache/fabric/wazero), which `make plugins`
// prewarms with a non-race build: under -race wazero's compiler is itself
// instrumented and a cold compile of a Go module takes seconds. Entries are
// keyed by wazero version and module content. FABRIC_TEST_WAZERO_CACHE
// overrides the location; "off" uses a fresh directory per run.
var cacheDir string

func TestMain(m *testing.M) {
	dir, cleanup := testCacheDir()
	cacheDir = dir
	code := valkeytest.Run(m)
	cleanup()
	os.Exit(code)
}

func testCacheDir() (string, func()) {
	env := os.Getenv("FABRIC_TEST_WAZERO_CACHE")
	if env != "" && env != "off" {
		return env, func() {}
	}
	if env == "" {
		if base, err := os.UserCacheDir(); err == nil {
			dir := filepath.Join(base, "fabric", "wazero")
			if os.MkdirAll(dir, 0o755) == nil {
				return dir, func() {}
			}
		}
	}
	dir, err := os.MkdirTemp("", "fabric-host-cache-")
	if err != nil {
		panic(err)
	}
	return dir, func() { os.RemoveAll(dir) }
}

// fixture returns the path of a built test plugin; a missing one fails the
// test with the command that builds it.
func fixture(tb testing.TB, name string) string {
	tb.Helper()
	for _, p := range []string{
		filepath.Join("..", "testdata", "plugins", name+".wasm"),
		filepath.Join("..", "bin", "plugins", name+".wasm"),
	} {
		if _, err := os.Stat(p); err == nil {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	tb.Fatalf("fixture %s.wasm is missing: run `make plugins` (scripts/build-plugins.sh) first", name)
	return ""
}

// fixturePlugins names the plugin of each fixture whose directory is
// named otherwise (a plugin file must be named after its plugin).
var fixturePlugins = map[string]string{"panic": "panicker", "loop": "looper", "plugerr": "swapper",
	"swap_v1": "swapper", "swap_v2": "swapper", "promoter_skipslow": "delayed_promoter", "squatter": "quota_reconciler"}

// pluginFile is the file name fixture f is installed under in a plugin
// directory: NAME.wasm for its plugin NAME.
func pluginFile(f string) string {
	if name, ok := fixturePlugins[f]; ok {
		return name + ".wasm"
	}
	return f + ".wasm"
}

// copyFile copies src to dst atomically (temp file, then rename), as a
// deploy tool would.
func copyFile(tb testing.TB, src, dst string) {
	tb.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		tb.Fatalf("read %s: %v", src, err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		tb.Fatalf("write %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		tb.Fatalf("rename %s: %v", dst, err)
	}
}

// logBuffer is a concurrency-safe log sink tests can search.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if os.Getenv("FABRIC_TEST_LOG") != "" {
		os.Stderr.Write(p)
	}
	return l.b.Write(p)
}

func (l *logBuffer) Contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

// Grep returns the last max lines of the log holding any of subs.
func (l *logBuffer) Grep(max int, subs ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.Join(out, "\n")
}

type testBundle struct {
	host *host.Host
	dir  string
	logs *logBuffer
	sig  *host.TestSignals
	// client is the host's backend (store: true only).
	client *valkey.Client
}

type setupOpts struct {
	fixtures []string // copied into the plugin dir before Start
	plugins  map[string]host.PluginConfig
	noStart  bool
	store    bool // use a real redis-server database
	timers   host.TimerConfig
	perCall  int // Config.PartitionsPerCall (0: the default)
	// policy is the host's Policy; nil is fixturePolicy (stock grants
	// plus every test fixture granted what it requests).
	policy *host.Policy
	// quarantine is Config.QuarantineBase (0: 300 ms).
	quarantine time.Duration
	// probation is Config.ProbationTimeout (0: the default).
	probation time.Duration
	// cacheDir is Config.CacheDir ("": the test binary's shared cache).
	cacheDir string
	// idleRelease is Config.IdleRelease (0: the default).
	idleRelease time.Duration
}

var (
	fixturePolicyOnce sync.Once
	fixturePolicyVal  host.Policy
)

// fixturePolicy is StockPolicy with every loadable testdata fixture
// granted exactly what its manifest requests, for tests about something
// other than grants.
func fixturePolicy(tb testing.TB) *host.Policy {
	tb.Helper()
	fixturePolicyOnce.Do(func() {
		p := host.StockPolicy()
		paths, _ := filepath.Glob(filepath.Join("..", "testdata", "plugins", "*.wasm"))
		for _, path := range paths {
			in, err := host.Inspect(context.Background(), path, host.InspectConfig{CacheDir: cacheDir})
			if err != nil {
				continue // a fault fixture refused before its manifest
			}
			if _, stock := p.Plugins[in.Manifest.Name]; stock {
				continue // an impostor (squatter): the stock grant stays
			}
			p.Plugins[in.Manifest.Name] = host.GrantOf(in.Manifest)
		}
		fixturePolicyVal = p
	})
	p := fixturePolicyVal
	return &p
}

// setup builds a host over a fresh plugin directory with 4 flow
// partitions and fast quarantine, and stops it when the test ends.
func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	dir := t.TempDir()
	for _, f := range o.fixtures {
		copyFile(t, fixture(t, f), filepath.Join(dir, pluginFile(f)))
	}
	logs := &logBuffer{}
	sig := &host.TestSignals{}
	sig.Init()
	cfg := host.Config{
		PluginDir:         dir,
		CacheDir:          cacheDir,
		Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Partitions:        model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2},
		Plugins:           o.plugins,
		Debounce:          50 * time.Millisecond,
		QuarantineBase:    300 * time.Millisecond,
		TestSignals:       sig,
		Timers:            o.timers,
		PartitionsPerCall: o.perCall,
		Policy:            o.policy,
		ProbationTimeout:  o.probation,
		IdleRelease:       o.idleRelease,
	}
	if cfg.Policy == nil {
		cfg.Policy = fixturePolicy(t)
	}
	if o.quarantine > 0 {
		cfg.QuarantineBase = o.quarantine
	}
	if o.cacheDir != "" {
		cfg.CacheDir = o.cacheDir
	}
	var client *valkey.Client
	if o.store {
		client = valkeytest.Client(t)
		cfg.Backend = client
	} else {
		cfg.Now = func(context.Context) (int64, error) { return 1_000_000, nil }
	}
	h, err := host.New(cfg)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	b := &testBundle{host: h, dir: dir, logs: logs, sig: sig, client: client}
	if !o.noStart {
		b.start(t)
	}
	return b
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	if err := b.host.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.host.Stop)
	select {
	case <-b.host.Started():
	case <-time.After(60 * time.Second):
		t.Fatal("host did not finish its initial directory scan within 60s")
	}
}

// callsOf returns the partition calls of plugin name.
func (b *testBundle) callsOf(name string) int64 {
	st, _ := b.host.Plugin(name)
	return st.Calls
}

// backend returns the valkey client the bundle's host uses.
func (b *testBundle) backend(t *testing.T) *valkey.Client {
	t.Helper()
	if b.client == nil {
		t.Fatal("setup without store: true has no backend")
	}
	return b.client
}

// createDelayed creates an execution on flow partition part of lane
// "default", delayed until delayUntil (ms, server clock), with
// ff_create_execution on the bundle's backend.
func (b *testBundle) createDelayed(t *testing.T, ctx context.Context, part uint16, delayUntil int64) model.ExecutionID {
	t.Helper()
	id := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: part}, model.NewUUID())
	if _, err := b.backend(t).CreateExecution(ctx, &valkey.CreateExecutionParams{
		ExecutionID: id, Namespace: "ns", LaneID: "default", ExecutionKind: "test", DelayUntil: delayUntil,
	}); err != nil {
		t.Fatalf("ff_create_execution: %v", err)
	}
	return id
}
