package host

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"github.com/fabric-host/fabric/abi"
	"log/slog"
	"os"
	"time"

	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/internal/testsignal"
	"github.com/fabric-host/fabric/model"
)

// Clock is the host's one source of wall time (records, quarantine
// deadlines, cadence). Inject a fake for deterministic tests.
type Clock interface{ Now() time.Time }

// WaitClock is a Clock that also drives the scanner loops' waits: the
// sweep cadence, due-time timer sleeps and quarantine backoff. With a
// Clock that is not a WaitClock those waits run on real time. Tests inject
// one to move time by hand.
type WaitClock interface {
	Clock
	// After returns a channel that receives once the clock has reached
	// Now()+d.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// PluginConfig is the host's per-plugin configuration; zero fields keep the
// manifest's values.
type PluginConfig struct {
	// Interval overrides the manifest's interval_ms.
	Interval time.Duration
	// Timeout overrides timeout_ms.
	Timeout time.Duration
	// BatchSize overrides batch_size.
	BatchSize uint32
	// Config entries override the manifest's config key by key.
	Config map[string]string
	// Disabled loads and lists the plugin but never runs it.
	Disabled bool
	// SHA256, when set, pins the file digest (hex): another file declaring
	// this plugin name is refused.
	SHA256 string
	// IdleRelease overrides Config.IdleRelease for this plugin: positive,
	// its instances are released after this long idle (also a dispatcher's
	// or a timer-driven scanner's, pinned warm by default); negative, it is
	// pinned warm. 0 keeps the host's policy.
	IdleRelease time.Duration
}

// Config configures a Host. Zero fields take the defaults of defaults.go.
type Config struct {
	// PluginDir is the directory watched for *.wasm plugins. Required.
	PluginDir string
	// CacheDir holds wazero's compilation cache; "" keeps it in memory (so
	// a restart compiles every plugin again, 0.5–1 s each).
	CacheDir string
	// VersionsFile keeps, across restarts, the newest version the host
	// has run of each plugin (JSON), so that a signed file older than it
	// is refused after a restart too (ErrDowngrade); "" keeps it in
	// memory only. It is the host's own state: keep it where the plugin
	// directory's writers cannot write (`fabric run` puts it beside
	// CacheDir, VersionsFileFor).
	VersionsFile string
	// CacheMaxBytes bounds CacheDir: after its initial load the host
	// deletes the least recently used entries beyond it (see
	// PruneCompilationCache). 0 means HostCacheMaxBytesDefault; negative
	// never prunes.
	CacheMaxBytes int64
	// Backend is the Valkey deployment plugins reach through host
	// functions (a *valkey.Client). Nil is allowed only with Store (tests)
	// or for a host that loads and lists plugins without running them; a
	// nil *valkey.Client counts as nil.
	Backend Backend
	// Store overrides the host functions' backend (tests and benchmarks);
	// default Backend's plugin data when it serves some
	// (hostseam.PluginDataSource: *valkey.Client's valkey.PluginStore).
	Store hostfn.Store
	// Postgres is the database the sql_query host function runs plugins'
	// statements on (a postgres.PluginSQL: (*postgres.Client).PluginSQL);
	// nil answers CodeUnavailable. A host
	// with Postgres and no Valkey Backend reads plugins' time from Clock.
	Postgres hostfn.SQLDB
	// Now is the plugins' clock in milliseconds; default Backend's server
	// TIME (to the microsecond when the Backend reads it so, as
	// *valkey.Client does), read at most once a second and advanced by the
	// host's monotonic clock in between (never ahead of the server).
	Now func(ctx context.Context) (int64, error)
	// serverClock is the default Now's clock (nil when Now was given or
	// there is no Backend): due-time timers read its exact mapping.
	serverClock *serverClock
	// Clock is the host's clock; default the system clock. A WaitClock
	// also paces the scanner loops.
	Clock Clock
	// Logger receives logs; default slog.Default().
	Logger *slog.Logger
	// Partitions are the partition counts; default Backend's, else
	// FlowFabric's defaults (256/32/32).
	Partitions model.PartitionConfig
	// Plugins holds per-plugin configuration by plugin name.
	Plugins map[string]PluginConfig
	// Policy is the operator's grants (grant.go): a plugin whose manifest
	// requests more than its grant is refused at load, and every plugin
	// runs under its grant's limits. Nil is StockPolicy(): the stock
	// plugins granted what they ship requesting, any other plugin no
	// capability at all. Its grants are not bound to the stock files;
	// StockPolicy().BindStock() binds them to a trusted signature, as
	// `fabric run` does.
	Policy *Policy
	// TrustedKeys are the ed25519 public keys plugin signatures
	// (NAME.wasm.sig, signature.go) are checked against: a file signed by
	// one of them must verify.
	TrustedKeys []ed25519.PublicKey
	// RequireSigned refuses every file not signed by a TrustedKeys key.
	RequireSigned bool
	// Debounce is the quiet time after a write before a file loads (default
	// 150 ms).
	Debounce time.Duration
	// StopTimeout bounds Stop (default 15 s).
	StopTimeout time.Duration
	// PoolSize is the number of warm instances kept per plugin version
	// (default 1; a dispatcher keeps at least 2). A discarded instance's
	// replacement is started off the call path.
	PoolSize int
	// RecycleCalls replaces an instance after this many calls (default
	// 10000).
	RecycleCalls int
	// RecycleBytes replaces an instance after a call that left its linear
	// memory larger than this (default 16 MiB; a Go guest starts at about
	// 3.5 MiB and never gives memory back); negative: never.
	RecycleBytes int64
	// IdleRelease: a plugin's instance idle this long in its pool is
	// released (its linear memory unmapped), and once the plugin holds no
	// instance its machine code's resident pages are dropped; its next call
	// instantiates afresh (a few ms). Default HostIdleReleaseDefault;
	// negative: never. Dispatchers and timer-driven scanners are pinned
	// warm unless PluginConfig.IdleRelease says otherwise (idle.go).
	IdleRelease time.Duration
	// Records is the number of cycle records kept per plugin (default 4096).
	Records int
	// MaxOutputBytes caps a scan result (default 64 KiB).
	MaxOutputBytes int
	// QuarantineBase is the first quarantine's length (default 1 s).
	QuarantineBase time.Duration
	// PoolBytes bounds the memory caps of one plugin version's idle
	// instances together (default 128 MiB; at least one is kept), so a
	// plugin with a large cap keeps fewer warm copies.
	PoolBytes int64
	// MaxCalls bounds the calls of healthy plugins running at once
	// (default 4 per core, at least 16); ProbationCalls bounds those of
	// plugins on probation, whose last call faulted (default half the
	// cores, at least 1), which run only while no healthy call waits.
	// ProbationTimeout is the shortest cut of a call on probation (default
	// 1 s; see scheduler in fair.go).
	MaxCalls, ProbationCalls int
	ProbationTimeout         time.Duration
	// PartitionsPerCall is the most partitions one plugin call scans, when
	// the plugin exports fabric_scan_batch (default 32, at most
	// abi.MaxBatchPartitions; 1 makes one call per partition). The call's
	// timeout_ms then bounds the whole chunk.
	PartitionsPerCall int
	// StatusFile, when set, receives a JSON snapshot of Plugins and Files
	// after every change and at most once a second while plugins run, for
	// `fabric plugins list --status`.
	StatusFile string
	// Observer, when set, is told of every finished sweep (metrics).
	Observer Observer
	// Timers configures due-time timers (timers.go); the zero value runs
	// them when there is a Backend.
	Timers TimerConfig
	// TestSignals, when set, receives test signals. Nil in production.
	TestSignals *TestSignals
	// Completions configures the completion listener and the dispatcher
	// driver (completion.go); off unless Completions.Enabled.
	Completions CompletionConfig
	// Leases configures partition leases (host/partlease): with a Valkey
	// Backend the host calls its plugins only on the partitions it holds a
	// lease on, sharing the deployment's partitions with the other hosts;
	// a lone host holds them all from its first step. Leases.Disabled, or
	// no Backend, scans every partition, as FlowFabric's engines do.
	Leases partlease.Config
}

// TestSignals are the edges tests wait on instead of sleeping.
type TestSignals struct {
	// Loaded fires when a plugin version starts serving (first load or
	// swap).
	Loaded testsignal.TestSignal[PluginStatus]
	// Rejected fires when a file fails validation.
	Rejected testsignal.TestSignal[FileStatus]
	// Quarantined fires when a plugin is quarantined.
	Quarantined testsignal.TestSignal[PluginStatus]
	// PartitionDone fires after every partition call.
	PartitionDone testsignal.TestSignal[CycleRecord]
}

// Init arms every signal.
func (s *TestSignals) Init() {
	s.Loaded.Init()
	s.Rejected.Init()
	s.Quarantined.Init()
	s.PartitionDone.Init()
}

// withDefaults fills defaults then validates; operator input errors are
// returned.
func (c Config) withDefaults() (Config, error) {
	if c.PluginDir == "" {
		return c, errors.New("host: Config.PluginDir is required")
	}
	st, err := os.Stat(c.PluginDir)
	if err != nil {
		return c, fmt.Errorf("host: Config.PluginDir: %w", err)
	}
	if !st.IsDir() {
		return c, fmt.Errorf("host: Config.PluginDir %q is not a directory", c.PluginDir)
	}
	c.Debounce = cmp.Or(c.Debounce, HostDebounceDefault)
	c.StopTimeout = cmp.Or(c.StopTimeout, HostStopTimeoutDefault)
	c.PoolSize = cmp.Or(c.PoolSize, HostPoolSizeDefault)
	c.RecycleCalls = cmp.Or(c.RecycleCalls, HostRecycleCallsDefault)
	c.RecycleBytes = cmp.Or(c.RecycleBytes, HostRecycleBytesDefault)
	c.Records = cmp.Or(c.Records, HostRecordsDefault)
	c.IdleRelease = cmp.Or(c.IdleRelease, HostIdleReleaseDefault)
	c.CacheMaxBytes = cmp.Or(c.CacheMaxBytes, HostCacheMaxBytesDefault)
	c.MaxOutputBytes = cmp.Or(c.MaxOutputBytes, HostMaxOutputBytesDefault)
	c.QuarantineBase = cmp.Or(c.QuarantineBase, HostQuarantineBaseDefault)
	c.PoolBytes = cmp.Or(c.PoolBytes, HostPoolBytesDefault)
	c.MaxCalls = cmp.Or(c.MaxCalls, defaultMaxCalls())
	c.ProbationCalls = cmp.Or(c.ProbationCalls, defaultProbationCalls())
	if c.MaxCalls < 1 || c.ProbationCalls < 1 {
		return c, fmt.Errorf("host: Config.MaxCalls %d, ProbationCalls %d: want both >= 1", c.MaxCalls, c.ProbationCalls)
	}
	c.ProbationTimeout = cmp.Or(c.ProbationTimeout, HostProbationTimeoutDefault)
	c.PartitionsPerCall = cmp.Or(c.PartitionsPerCall, HostPartitionsPerCallDefault)
	if c.PartitionsPerCall < 1 || c.PartitionsPerCall > abi.MaxBatchPartitions {
		return c, fmt.Errorf("host: Config.PartitionsPerCall %d: want 1..%d", c.PartitionsPerCall, abi.MaxBatchPartitions)
	}
	if c.Policy == nil {
		p := StockPolicy()
		c.Policy = &p
	}
	if err := c.Policy.Validate(); err != nil {
		return c, err
	}
	if c.Policy.Default.MaxOutputBytes == 0 {
		p := *c.Policy
		p.Default.MaxOutputBytes = c.MaxOutputBytes
		c.Policy = &p
	}
	if c.RequireSigned && len(c.TrustedKeys) == 0 {
		return c, errors.New("host: Config.RequireSigned needs TrustedKeys")
	}
	c.Timers.SafetyFactor = cmp.Or(c.Timers.SafetyFactor, TimerSafetyFactorDefault)
	c.Timers.Calls = cmp.Or(c.Timers.Calls, TimerCallsDefault)
	c.Completions = c.Completions.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if isNilPointer(c.Backend) {
		c.Backend = nil
	}
	if isNilPointer(c.Postgres) {
		c.Postgres = nil
	}
	if c.Store == nil && c.Backend != nil {
		c.Store = hostfn.StoreOf(c.Backend)
	}
	if c.Now == nil && c.Backend != nil {
		read := msReader(c.Backend.ServerTime)
		if mb, ok := c.Backend.(microsBackend); ok {
			read = mb.ServerTimeMicros
		}
		c.serverClock = newServerClock(read, serverClockRefresh)
		c.Now = c.serverClock.Now
	}
	if c.Now == nil && c.Postgres != nil {
		clock := c.Clock
		c.Now = func(context.Context) (int64, error) { return clock.Now().UnixMilli(), nil }
	}
	if c.Partitions == (model.PartitionConfig{}) {
		if c.Backend != nil {
			c.Partitions = c.Backend.Partitions()
		} else {
			c.Partitions = model.DefaultPartitionConfig()
		}
	}
	if err := c.Partitions.Validate(); err != nil {
		return c, fmt.Errorf("host: %w", err)
	}
	return c, nil
}
