package host

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/tetratelabs/wazero"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/internal/startstop"
)

// Host runs the WebAssembly plugins of a directory: it loads every valid
// *.wasm, drives each scanner on its cadence, quarantines a plugin that
// faults without disturbing the others, and hot-swaps a plugin when a new
// version of its file appears.
//
//	h, err := host.New(host.Config{PluginDir: "bin/plugins", CacheDir: cache, Backend: client, Logger: log})
//	if err != nil { ... }
//	if err := h.Start(ctx); err != nil { ... }
//	defer h.Stop()
//
// # Notes
//
//   - Start returns at once; Started is closed once the initial directory
//     scan is done (every plugin present at start is loaded or rejected).
//     Stop blocks, tolerates a host never started and a second Stop, and
//     returns within Config.StopTimeout.
//   - Safe for concurrent use.
type Host struct {
	startstop.Base

	cfg   Config
	cache wazero.CompilationCache
	lc    loaderConfig

	mu      sync.Mutex
	plugins map[string]*plugin
	files   map[string]FileStatus

	statusMu    sync.Mutex
	statusWrote time.Time
	// statusFinal: the stopped host's last status was written.
	statusFinal bool

	// wakes is the due-timer wake service (nil with timers off).
	wakes *wakeListener
	// completions is the completion dispatch service (nil when off).
	completions *completionService

	// leases decides which partitions this host scans (nil: all);
	// leaseSvc keeps them (lease_service.go).
	leases   *partlease.Manager
	leaseSvc *leaseService

	// sched shares the machine among plugin calls.
	sched *scheduler

	// shadows is what candidate versions share (shadow.go).
	shadows shadowRegistry

	// versions is the newest version run of each plugin, by name
	// (identity.go); h.mu guards it.
	versions map[string]*versionMark
}

// New validates cfg, fills its defaults and prepares the compilation
// cache. It does not touch the plugin directory until Start.
func New(cfg Config) (*Host, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	versions, err := loadVersions(cfg.VersionsFile)
	if err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, plugins: map[string]*plugin{}, files: map[string]FileStatus{}, versions: versions,
		sched: newScheduler(cfg.MaxCalls, cfg.ProbationCalls, cfg.ProbationTimeout)}
	if cfg.CacheDir != "" {
		if h.cache, err = newDirCache(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("host: compilation cache %s: %w", cfg.CacheDir, err)
		}
	} else {
		h.cache = wazero.NewCompilationCache()
	}
	h.wakes = h.newWakeListener()
	h.completions = h.newCompletionService()
	h.lc = newLoaderConfig(h.cache, cfg.Store, cfg.Now, cfg, func(name string) PluginConfig { return h.pluginConfig(name) })
	h.lc.named = true // the plugin directory's files: NAME.wasm is plugin NAME
	if err := h.newLeases(); err != nil {
		h.cache.Close(context.Background())
		return nil, err
	}
	return h, nil
}

func newLoaderConfig(cache wazero.CompilationCache, store hostfn.Store, now func(context.Context) (int64, error), cfg Config, override func(string) PluginConfig) loaderConfig {
	var stats hostfn.Stats
	return loaderConfig{
		cache: cache,
		fns:   hostfn.Functions(hostfn.Config{Store: store, Now: now, SQL: cfg.Postgres}),
		caller: func(m *Module, tag string) *hostfn.Caller {
			return &hostfn.Caller{Plugin: m.declared.Name, Version: m.declared.Version, Caps: &abi.Capabilities{}, Tag: tag, Stats: &stats, Logger: cfg.Logger}
		},
		probeTimeout: HostProbeTimeoutDefault,
		maxFileBytes: HostMaxFileBytesDefault,
		maxOut:       cfg.MaxOutputBytes,
		poolSize:     cfg.PoolSize,
		recycle:      cfg.RecycleCalls,
		override:     override,
		grant:        cfg.Policy.ForFile,
		trust:        newTrust(cfg.TrustedKeys, cfg.RequireSigned),
		poolBytes:    cfg.PoolBytes,
		recycleBytes: cfg.RecycleBytes,
		codeDir:      codeDirOf(cfg.CacheDir),
		cacheDir:     cfg.CacheDir,
		log:          cfg.Logger,
	}
}

// codeDirOf is where machine code files live under a cache directory
// ("" for none).
func codeDirOf(cacheDir string) string {
	if cacheDir == "" {
		return ""
	}
	return filepath.Join(cacheDir, codeDirName)
}

// Start loads the plugin directory and starts watching it. It returns at
// once; see Started.
func (h *Host) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := h.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(h.cfg.PluginDir)
		if err != nil {
			w.Close()
		}
	}
	if err != nil {
		stopped()
		return fmt.Errorf("host: watch %s: %w", h.cfg.PluginDir, err)
	}
	go func() {
		defer stopped()
		if h.leaseSvc != nil {
			_ = h.leaseSvc.Start(ctx) // this host's share, before any loop starts
			defer h.leaseSvc.Stop()   // released after every loop stopped
		}
		defer h.shutdown()
		defer w.Close()
		if h.wakes != nil {
			_ = h.wakes.Start(ctx) // returns at once; never fails
			defer h.wakes.Stop()
		}
		reaped := make(chan struct{})
		go func() { defer close(reaped); h.reapIdle(ctx) }()
		defer func() { <-reaped }() // before shutdown closes the modules
		h.scanDir(ctx)
		h.startShadows(ctx)
		if h.completions != nil { // after the initial load: dispatchers are in place
			_ = h.completions.Start(ctx) // returns at once; never fails
			defer h.completions.Stop()
		}
		// Started once the plugins run: the housekeeping below (walking a
		// large compilation cache, returning the load's garbage) must not
		// hold readiness back while the loops already sweep.
		started()
		h.pruneCache()
		releaseLoadGarbage()
		h.watch(ctx, w)
	}()
	return nil
}

// Close releases the compilation cache; call it after the last Stop.
func (h *Host) Close(ctx context.Context) error { return h.cache.Close(ctx) }

// pruneCache keeps the compilation cache within CacheMaxBytes.
func (h *Host) pruneCache() {
	if h.cfg.CacheDir == "" || h.cfg.CacheMaxBytes < 0 {
		return
	}
	res, err := PruneCompilationCache(h.cfg.CacheDir, h.cfg.CacheMaxBytes, time.Now())
	switch {
	case err != nil:
		h.cfg.Logger.Warn("compilation cache not pruned", "dir", h.cfg.CacheDir, "error", err)
	case res.Removed > 0:
		h.cfg.Logger.Info("compilation cache pruned", "dir", h.cfg.CacheDir, "removed", res.Removed,
			"freed_bytes", res.Freed, "entries", res.Entries, "bytes", res.Bytes)
	}
}

// scanDir loads every *.wasm present: compiled as many at a time as the
// process has CPUs (a cold compile of a Go plugin takes seconds), then
// installed in name order, as one file after the other would be.
func (h *Host) scanDir(ctx context.Context) {
	paths, _ := filepath.Glob(filepath.Join(h.cfg.PluginDir, "*.wasm"))
	sort.Strings(paths)
	type loaded struct {
		m   *Module
		err error
	}
	results := make([]chan loaded, len(paths))
	slots := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	for i, p := range paths {
		results[i] = make(chan loaded, 1)
		go func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if ctx.Err() != nil {
				results[i] <- loaded{err: ctx.Err()}
				return
			}
			m, err := h.loadModule(ctx, p)
			results[i] <- loaded{m, err}
		}()
	}
	for i, p := range paths {
		r := <-results[i]
		if ctx.Err() != nil {
			if r.m != nil {
				r.m.Close(context.WithoutCancel(ctx))
			}
			continue
		}
		h.install(ctx, p, r.m, r.err)
	}
}

// watch debounces write events per file, then loads (or unloads) it.
func (h *Host) watch(ctx context.Context, w *fsnotify.Watcher) {
	type firing struct {
		path string
		gen  uint64
	}
	fire := make(chan firing, 64)
	pending := map[string]uint64{}
	var gen uint64
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			h.cfg.Logger.Warn("plugin directory watch error", "dir", h.cfg.PluginDir, "error", err)
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			// A signature written or removed reloads its plugin file.
			ev.Name = strings.TrimSuffix(ev.Name, SignatureSuffix)
			if !strings.HasSuffix(ev.Name, ".wasm") {
				continue
			}
			gen++
			pending[ev.Name] = gen
			f := firing{ev.Name, gen}
			time.AfterFunc(h.cfg.Debounce, func() {
				select {
				case fire <- f:
				case <-ctx.Done():
				}
			})
		case f := <-fire:
			if pending[f.path] != f.gen {
				continue // a later write re-armed the debounce
			}
			delete(pending, f.path)
			if _, err := os.Stat(f.path); errors.Is(err, os.ErrNotExist) {
				h.unloadPath(ctx, f.path)
				continue
			}
			h.loadPath(ctx, f.path)
		}
	}
}

// loadPath validates and compiles path off the hot path, then installs it:
// a new plugin starts its loop; a new version of a running plugin is
// swapped in at the next partition boundary. A file that fails never
// replaces a working plugin.
func (h *Host) loadPath(ctx context.Context, path string) {
	m, err := h.loadModule(ctx, path)
	h.install(ctx, path, m, err)
}

// offBackend is why a plugin with manifest man cannot run on this host's
// backend ("" when it can).
func (h *Host) offBackend(man abi.Manifest) string {
	switch {
	case len(man.Capabilities.SQL) > 0 && h.cfg.Postgres == nil:
		return "needs Postgres (capabilities.sql) and this host has none"
	case len(man.Capabilities.FCall)+len(man.Capabilities.Read)+len(man.Capabilities.Write) > 0 && h.cfg.Store == nil && h.cfg.Postgres != nil:
		return "needs Valkey (capabilities fcall/read/write) and this host runs on Postgres only"
	}
	return ""
}

// offBackendImports reports whether a module's imports say it is for the
// backend this host lacks: it imports host functions of the other
// backend's capabilities and none of this one's.
func (h *Host) offBackendImports(shape moduleShape) bool {
	switch importsBackend(shape) {
	case BackendPostgres:
		return h.cfg.Postgres == nil
	case BackendValkey:
		return h.cfg.Store == nil && h.cfg.Postgres != nil
	}
	return false
}

// The backends a plugin file's imports may name (PluginBackend).
const (
	BackendValkey   = "valkey"
	BackendPostgres = "postgres"
)

// importsBackend is the one backend whose host functions a module
// imports ("" for neither or both).
func importsBackend(shape moduleShape) string {
	sql, valkey := false, false
	for _, imp := range shape.Imports {
		mod, name, _ := cutLast(imp, '.')
		if mod != abi.Namespace {
			continue
		}
		f, _ := abi.LookupHostFunc(name)
		switch f.Capability {
		case abi.CapSQL:
			sql = true
		case abi.CapFCall, abi.CapRead, abi.CapWrite:
			valkey = true
		}
	}
	switch {
	case sql && !valkey:
		return BackendPostgres
	case valkey && !sql:
		return BackendValkey
	}
	return ""
}

// PluginBackend is the backend a plugin file is for by its imports
// (BackendValkey, BackendPostgres, "" for neither or both): a host on
// the other backend only reads its manifest, never compiles it.
func PluginBackend(path string) (string, error) {
	_, _, shape, err := readModuleFile(path, HostMaxFileBytesDefault)
	if err != nil {
		return "", err
	}
	return importsBackend(shape), nil
}

// loadModule loads path for this host. A plugin whose imports say it is
// for the other backend only has its manifest read, in wazero's
// interpreter (a fraction of a compile: the Postgres plugins of the stock
// set are not compiled by a Valkey host), unless the compilation cache
// holds it already (loading it from there is quicker still); should its
// manifest say it runs here after all, it is compiled as any other.
func (h *Host) loadModule(ctx context.Context, path string) (*Module, error) {
	b, digest, shape, err := readModuleFile(path, h.lc.maxFileBytes)
	if err != nil {
		return nil, err
	}
	if h.offBackendImports(shape) && !cacheHoldsModule(h.cfg.CacheDir, b) {
		lc := h.lc
		lc.interpret = true
		m, err := buildModule(ctx, path, b, digest, shape, lc)
		if err == nil {
			man := m.Manifest()
			if h.offBackend(man) != "" && !h.cfg.Plugins[man.Name].Disabled {
				return m, nil // closed once installed: it never runs here
			}
			m.Close(ctx)
		} else if ctx.Err() != nil {
			return nil, err
		}
		// Its manifest or a failure decides otherwise: the compiled load
		// is the one that counts.
	}
	return buildModule(ctx, path, b, digest, shape, h.lc)
}

// install makes the outcome of loading path (m, or err) the host's: a
// rejected file is recorded, a new plugin starts, a new version swaps in.
func (h *Host) install(ctx context.Context, path string, m *Module, err error) {
	log := h.cfg.Logger
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		fs := FileStatus{Path: path, State: StateInvalid, Error: err.Error(), Reason: RejectReason(err), At: h.cfg.Clock.Now()}
		if _, digest, _, rerr := readModuleFile(path, HostMaxFileBytesDefault); rerr == nil || digest != "" {
			fs.SHA256 = digest
		}
		h.mu.Lock()
		h.files[path] = fs
		h.mu.Unlock()
		log.Warn("plugin rejected", "path", path, "reason", fs.Reason, "error", err)
		h.statusChanged(true)
		h.cfg.TestSignals.rejected(fs)
		return
	}
	man := m.Manifest()
	h.mu.Lock()
	if err := h.checkVersion(m); err != nil {
		h.mu.Unlock()
		m.Close(ctx)
		h.install(ctx, path, nil, err)
		return
	}
	h.files[path] = FileStatus{Path: path, SHA256: m.sha256, Plugin: man.Name, State: StateValid, At: h.cfg.Clock.Now()}
	p := h.plugins[man.Name]
	if p != nil && p.mod.Load().sha256 == m.sha256 {
		h.mu.Unlock()
		m.Close(ctx)
		return
	}
	if p != nil {
		loaded := m
		if p.offBackend {
			m = m.statusOnly()
		}
		old := h.installLocked(p, m)
		h.mu.Unlock()
		old.retire(context.WithoutCancel(ctx))
		if p.offBackend {
			loaded.Close(ctx)
		}
		oldMan := old.Manifest()
		log.Info("plugin swapped", "plugin", man.Name, "old_version", oldMan.Version, "new_version", man.Version, "sha256", m.sha256, "path", path)
		h.statusChanged(true)
		h.cfg.TestSignals.loaded(p.status())
		return
	}
	p = &plugin{h: h, name: man.Name, done: make(chan struct{}), state: StateRunning, kick: make(chan struct{}, 1)}
	p.budget.SetLimits(budgetOf(m.Limits()))
	p.records.max = h.cfg.Records
	p.tracker = NewFailureTracker(func(item string, failures int) {
		log.Error("persistent FCALL failure; skipping for 10 scan cycles", "plugin", man.Name, "item", item, "failures", failures, "backoff_cycles", trackerBackoffCycles)
	})
	off := h.offBackend(man)
	if off != "" {
		// Its compiled code, warm instance and decoded module would only
		// hold memory (a few MiB a plugin): keep what status shows, release
		// the rest. A new version of the file is loaded afresh.
		loaded := m
		m = m.statusOnly()
		defer loaded.Close(ctx)
	}
	p.mod.Store(m)
	if h.timersOn() {
		p.wake = newWakeState(man)
	}
	switch {
	case h.cfg.Plugins[man.Name].Disabled:
		p.state = StateDisabled
	case off != "":
		p.state, p.reason = StateDisabled, off
		p.offBackend = true
	case man.Kind == abi.KindDispatcher && h.cfg.Completions.Enabled && h.cfg.Backend != nil && !man.Sweeps():
		p.state = StateRunning // driven by completions (dispatch.go), no sweep loop
	case man.Kind != abi.KindScanner && !man.Sweeps():
		p.state = StateIdle
	}
	h.plugins[man.Name] = p
	if p.state == StateRunning && (man.Kind == abi.KindScanner || man.Sweeps()) {
		var pctx context.Context
		pctx, p.cancel = context.WithCancel(ctx)
		go p.supervise(pctx)
	} else {
		close(p.done)
	}
	h.mu.Unlock()
	log.Info("plugin loaded", "plugin", man.Name, "version", man.Version, "kind", string(man.Kind), "sha256", m.sha256, "path", path, "compile_ms", m.compile.Milliseconds())
	h.statusChanged(true)
	h.cfg.TestSignals.loaded(p.status())
}

// unloadPath stops the plugin served from a removed file.
func (h *Host) unloadPath(ctx context.Context, path string) {
	h.mu.Lock()
	if f, ok := h.files[path]; ok && f.State == StateInvalid {
		h.cfg.Logger.Info("rejected plugin file removed", "path", path)
		defer h.statusChanged(true)
	}
	delete(h.files, path)
	var victim *plugin
	for name, p := range h.plugins {
		if p.mod.Load().path == path {
			victim = p
			delete(h.plugins, name)
		}
	}
	h.mu.Unlock()
	if victim == nil {
		return
	}
	if victim.cancel != nil {
		victim.cancel()
	}
	<-victim.done
	victim.change.close(context.WithoutCancel(ctx))
	victim.mod.Load().retire(context.WithoutCancel(ctx))
	h.cfg.Logger.Info("plugin unloaded", "plugin", victim.name, "path", path)
	h.statusChanged(true)
}

// shutdown stops every loop in parallel within StopTimeout and closes
// every module.
func (h *Host) shutdown() {
	h.mu.Lock()
	ps := make([]*plugin, 0, len(h.plugins))
	for _, p := range h.plugins {
		ps = append(ps, p)
	}
	h.plugins = map[string]*plugin{}
	h.mu.Unlock()
	for _, p := range ps {
		if p.cancel != nil {
			p.cancel()
		}
	}
	deadline := time.NewTimer(h.cfg.StopTimeout)
	defer deadline.Stop()
	ctx := context.Background()
	for _, p := range ps {
		select {
		case <-p.done:
			p.change.close(ctx)
			p.mod.Load().retire(ctx)
		case <-deadline.C:
			h.cfg.Logger.Error("plugin did not stop within the stop timeout", "plugin", p.name, "stop_timeout_ms", h.cfg.StopTimeout.Milliseconds())
		}
		p.mu.Lock()
		p.state = StateStopped
		p.mu.Unlock()
	}
	// The status file's last word: every plugin as it ended, and that
	// the host is gone (`fabric plugins list --status` says so).
	final := make([]PluginStatus, 0, len(ps))
	for _, p := range ps {
		final = append(final, p.status())
	}
	sort.Slice(final, func(i, j int) bool { return final[i].Name < final[j].Name })
	h.writeStatus(func() Snapshot {
		snap := h.Snapshot()
		snap.Plugins, snap.Stopped = final, true
		return snap
	}, true, true)
}

// Plugins returns a snapshot of every loaded plugin, by name.
func (h *Host) Plugins() []PluginStatus {
	h.mu.Lock()
	ps := make([]*plugin, 0, len(h.plugins))
	for _, p := range h.plugins {
		ps = append(ps, p)
	}
	h.mu.Unlock()
	out := make([]PluginStatus, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Plugin returns the snapshot of one plugin.
func (h *Host) Plugin(name string) (PluginStatus, bool) {
	h.mu.Lock()
	p := h.plugins[name]
	h.mu.Unlock()
	if p == nil {
		return PluginStatus{}, false
	}
	return p.status(), true
}

// Files returns the latest load outcome of every file, by path.
func (h *Host) Files() []FileStatus {
	h.mu.Lock()
	out := make([]FileStatus, 0, len(h.files))
	for _, f := range h.files {
		out = append(out, f)
	}
	h.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Records returns the kept cycle records of plugin name, oldest first.
func (h *Host) Records(name string) []CycleRecord {
	h.mu.Lock()
	p := h.plugins[name]
	h.mu.Unlock()
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.records.snapshot()
}

// Snapshot is what the status file holds.
type Snapshot struct {
	At      time.Time      `json:"at"`
	ABI     string         `json:"abi"`
	Dir     string         `json:"dir"`
	Plugins []PluginStatus `json:"plugins"`
	Files   []FileStatus   `json:"files"`
	// Leases is this host's partition leases (absent when off).
	Leases *partlease.Status `json:"leases,omitempty"`
	// Stopped: the host has stopped; Plugins is each plugin as it ended.
	Stopped bool `json:"stopped,omitempty"`
	// PID and Hostname name the host's process, so a reader on the same
	// machine can tell a status file whose host died without stopping.
	PID      int    `json:"pid,omitempty"`
	Hostname string `json:"hostname,omitempty"`
}

// Snapshot returns the host's state.
func (h *Host) Snapshot() Snapshot {
	s := Snapshot{At: h.cfg.Clock.Now(), ABI: abi.Version, Dir: h.cfg.PluginDir, Plugins: h.Plugins(), Files: h.Files(), PID: os.Getpid()}
	s.Hostname, _ = os.Hostname()
	if st, ok := h.Leases(); ok {
		s.Leases = &st
	}
	return s
}

// statusChanged rewrites the status file (atomically: temp then rename),
// at most once a second unless force.
func (h *Host) statusChanged(force bool) {
	if h.cfg.StatusFile == "" {
		return
	}
	h.writeStatus(h.Snapshot, force, false)
}

// writeStatus writes snap() to the status file unless one was written
// within the last second (and not force); after the last (final) write,
// nothing more is written.
func (h *Host) writeStatus(snap func() Snapshot, force, final bool) {
	if h.cfg.StatusFile == "" {
		return
	}
	h.statusMu.Lock()
	defer h.statusMu.Unlock()
	if h.statusFinal {
		return
	}
	h.statusFinal = final
	now := h.cfg.Clock.Now()
	if !force && now.Sub(h.statusWrote) < time.Second {
		return
	}
	h.statusWrote = now
	b, err := json.MarshalIndent(snap(), "", "  ")
	if err == nil {
		tmp := h.cfg.StatusFile + ".tmp"
		if err = os.WriteFile(tmp, b, 0o644); err == nil {
			err = os.Rename(tmp, h.cfg.StatusFile)
		}
	}
	if err != nil {
		h.cfg.Logger.Warn("status file write failed", "path", h.cfg.StatusFile, "error", err)
	}
}

// Inspection is what Inspect learns about a plugin file offline.
type Inspection struct {
	Path     string        `json:"path"`
	SHA256   string        `json:"sha256"`
	Size     int64         `json:"size"`
	Manifest abi.Manifest  `json:"manifest"`
	Imports  []string      `json:"imports"`
	Exports  []string      `json:"exports"`
	Compile  time.Duration `json:"compile_ns"`
	// Granted is the plugin's grant under InspectConfig.Policy (nil
	// without one), Limits what it would run with, and NotGranted the
	// difference between its requests and the grant ("" when within).
	Granted    *Grant  `json:"granted,omitempty"`
	Limits     *Limits `json:"limits,omitempty"`
	NotGranted string  `json:"not_granted,omitempty"`
	// Signature is the file's signature when one verified against
	// InspectConfig.TrustedKeys.
	Signature *Signature `json:"signature,omitempty"`
}

// InspectConfig configures Inspect.
type InspectConfig struct {
	// CacheDir is the compilation cache directory ("" = in memory).
	CacheDir string
	// Policy, when set, fills Inspection.Granted, Limits and NotGranted.
	// A request beyond the grant is reported there, not as an error.
	Policy *Policy
	// TrustedKeys and RequireSigned check the file's signature as
	// Config's do; a refusal is Inspect's error.
	TrustedKeys   []ed25519.PublicKey
	RequireSigned bool
}

// Inspect validates a plugin file the way the host would before loading
// it (static check, sha256, compile, manifest, ABI) without a backend.
func Inspect(ctx context.Context, path string, cfg InspectConfig) (*Inspection, error) {
	var cache wazero.CompilationCache
	var err error
	if cfg.CacheDir != "" {
		if cache, err = newDirCache(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("host: compilation cache %s: %w", cfg.CacheDir, err)
		}
	} else {
		cache = wazero.NewCompilationCache()
	}
	defer cache.Close(ctx)
	hc, _ := (Config{PluginDir: os.TempDir()}).withDefaults()
	lc := newLoaderConfig(cache, nil, nil, hc, func(string) PluginConfig { return PluginConfig{} })
	lc.grant = nil // reported below rather than refused
	lc.trust = newTrust(cfg.TrustedKeys, cfg.RequireSigned)
	lc.cacheDir = cfg.CacheDir
	m, err := loadModule(ctx, path, lc)
	if err != nil {
		return nil, err
	}
	defer m.Close(ctx)
	in := &Inspection{Path: path, SHA256: m.sha256, Size: m.size, Manifest: m.Declared(), Imports: m.Imports(), Exports: m.Exports(), Compile: m.compile, Signature: m.sig}
	if cfg.Policy != nil {
		if err := cfg.Policy.Validate(); err != nil {
			return nil, err
		}
		p := *cfg.Policy
		if p.Default.MaxOutputBytes == 0 {
			p.Default.MaxOutputBytes = hc.MaxOutputBytes
		}
		signer := ""
		if in.Signature != nil {
			signer = in.Signature.Key
		}
		g, withheld := p.ForFile(in.Manifest.Name, in.SHA256, signer)
		lim := g.Limits(applyOverride(in.Manifest, PluginConfig{}))
		in.Granted, in.Limits = &g, &lim
		if err := g.Check(in.Manifest); err != nil {
			in.NotGranted = strings.TrimPrefix(err.Error(), ErrNotGranted.Error()+": "+in.Manifest.Name+": ")
			if withheld != "" {
				in.NotGranted += " (" + withheld + ")"
			}
		}
	}
	return in, nil
}

// installLocked makes m p's live version, as every hot swap does (a new
// file, a promote, a rollback), and returns the version it replaced; h.mu
// is held. A new version starts with a clean record: no backoff inherited
// from the old one, its first call within one interval; a quarantined
// plugin runs the fix at once instead of waiting out the old version's
// fault.
func (h *Host) installLocked(p *plugin, m *Module) *Module {
	old := p.mod.Swap(m)
	if p.wake != nil {
		p.wake.setPatterns(m.Manifest())
	}
	p.budget.SetLimits(budgetOf(m.Limits()))
	p.mu.Lock()
	p.swaps++
	p.lastSwap = h.cfg.Clock.Now()
	p.quarantines, p.quarantineUntil = 0, time.Time{}
	fixed := p.state == StateQuarantined
	if fixed {
		p.state, p.reason, p.fault = StateRunning, "", ""
	}
	p.mu.Unlock()
	p.fair.reset()
	if fixed {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return old
}
