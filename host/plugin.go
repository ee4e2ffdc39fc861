package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/env"
	"github.com/fabric-host/fabric/host/hostfn"
)

// ErrBadOutput is matched by a plugin call whose output is not a valid
// message (garbage, oversized), or that sent a host call a request that
// is not one (hostfn.ErrMalformedRequest: a count or length the bytes do
// not hold, garbage).
var ErrBadOutput = errors.New("host: plugin returned bad output")

// ErrTimeout is matched by a plugin call killed at its deadline.
var ErrTimeout = errors.New("host: plugin call timed out")

// ErrTrap is matched by a plugin call that trapped, panicked or exited.
var ErrTrap = errors.New("host: plugin trapped")

// errTooLarge: the file is above the host's size limit.
var errTooLarge = errors.New("host: plugin file too large")

// ErrDigestMismatch: the file's sha256 is not the pinned one.
var ErrDigestMismatch = errors.New("host: plugin sha256 does not match the pinned digest")

// Module is one compiled, validated version of a plugin: its file, digest,
// manifest and a pool of warm instances.
//
// # Notes
//
//   - Safe for concurrent use. Close waits for calls in flight.
type Module struct {
	path     string
	sha256   string
	size     int64
	shape    moduleShape
	declared abi.Manifest // as the plugin declared it, after defaults
	manifest abi.Manifest // effective: host overrides and grant applied
	grant    Grant        // the operator's grant, as Policy.For resolved it
	limits   Limits       // effective limits (grant.Limits of manifest)
	sig      *Signature   // the verified signature, nil when unsigned
	compile  time.Duration

	// rt is the module's own wazero runtime (its memory cap is a runtime
	// setting) holding WASI, the Extism env (package env) and fabric's host
	// functions; main is the plugin compiled in it.
	rt   wazero.Runtime
	main wazero.CompiledModule
	// codeKey names main's machine code in liveCode (codefile.go): the
	// compiled module is closed with the last Module using it.
	codeKey uintptr
	// data: main's data segments, mapped from a file (datafile_linux.go);
	// nil when they are on the Go heap.
	data     *dataFile
	seq      atomic.Uint64 // names instances apart in rt
	fns      hostfnCaller
	poolSize int
	recycle  int
	maxOut   int
	// recycleBytes: an instance whose linear memory grew past this is
	// replaced after its call (a Go guest's memory never shrinks).
	recycleBytes int64
	// pages is the memory cap the module runs under, in 64 KiB pages;
	// poolBytes bounds the memory its idle instances may hold.
	pages     uint32
	poolBytes int64

	mu       sync.Mutex
	pool     []*instance
	inflight int
	retired  bool
	closed   bool
	drained  chan struct{}
	// warming counts replacement instances being started off the call
	// path (refill); Close waits for them.
	warming int
	warms   sync.WaitGroup
	// codeDropped: releaseIdle dropped the machine code's resident pages
	// and no call has run since (idle.go).
	codeDropped bool
	// busy counts the instances in a call (taken from the pool or made
	// for it).
	busy int
	// idleReleases counts the instances releaseIdle released.
	idleReleases atomic.Int64
}

// hostfnCaller builds the Caller for calls that are not partition scans.
type hostfnCaller func(m *Module, tag string) *hostfn.Caller

type instance struct {
	mod    api.Module  // the plugin's module instance
	kernel *env.Kernel // its Extism blocks, input, output, config
	// exports are the module's functions called so far, each resolved
	// once (wazero makes a call engine per lookup).
	exports map[string]api.Function
	mem     *instanceMemory
	inited  bool // the guest's language runtime is initialised
	calls   int
	stderr  *tailBuffer
	// idleSince is when the instance last went back to the pool
	// (releaseIdle releases it once idle long enough).
	idleSince time.Time
}

// Path returns the file the module was loaded from.
func (m *Module) Path() string { return m.path }

// SHA256 returns the hex sha256 of the file.
func (m *Module) SHA256() string { return m.sha256 }

// Manifest returns the effective manifest (host overrides applied).
func (m *Module) Manifest() abi.Manifest { return m.manifest }

// Declared returns the manifest as the plugin declared it (defaults
// applied): what it requests.
func (m *Module) Declared() abi.Manifest { return m.declared }

// Grant returns what the operator granted the plugin (Policy.For).
func (m *Module) Grant() Grant { return m.grant }

// Limits returns the effective limits the plugin runs under: the grant's
// ceilings resolved against its manifest (Grant.Limits).
func (m *Module) Limits() Limits { return m.limits }

// Signer returns the id of the trusted key whose signature the file
// carries (KeyID), or "" for an unsigned file.
func (m *Module) Signer() string {
	if m.sig == nil {
		return ""
	}
	return m.sig.Key
}

// CompileTime returns how long compilation took.
func (m *Module) CompileTime() time.Duration { return m.compile }

// Imports returns the module's function imports ("module.name").
func (m *Module) Imports() []string { return slices.Clone(m.shape.Imports) }

// Exports returns the module's exports.
func (m *Module) Exports() []string { return slices.Clone(m.shape.Exports) }

// Size returns the file size in bytes.
func (m *Module) Size() int64 { return m.size }

// loaderConfig is what loading a module needs.
type loaderConfig struct {
	cache        wazero.CompilationCache
	fns          []hostfn.HostFunction
	caller       hostfnCaller
	probeTimeout time.Duration
	maxFileBytes int64
	maxOut       int
	poolSize     int
	recycle      int
	override     func(name string) PluginConfig
	// grant returns the operator's grant of a plugin name for one file of
	// it (Policy.ForFile: its digest, its trusted signer); nil (Inspect)
	// checks nothing and runs the plugin as it requests.
	grant func(name, digest, signer string) (Grant, string)
	// named refuses a file whose name is not its plugin's (NAME.wasm for
	// plugin NAME, see ErrNameMismatch): the plugin directory's files.
	named bool
	// trust verifies signatures (signature.go); nil checks none.
	trust *trustConfig
	// poolBytes bounds the memory of one module's idle instances.
	poolBytes int64
	// recycleBytes: see Module.recycleBytes.
	recycleBytes int64
	// codeDir holds machine code files (fileBackCode); "" keeps the code
	// in anonymous memory.
	codeDir string
	// cacheDir is the compilation cache's directory ("" in memory): each
	// compile marks the entry it used (markWazeroEntry).
	cacheDir string
	// interpret loads the module into wazero's interpreter instead of
	// compiling it: enough to read the manifest of a plugin this host
	// will not run (offBackendImports), in a fraction of a compile.
	interpret bool
	// log reports what is worth a debug line (nil: nothing).
	log *slog.Logger
}

// readModuleFile reads and statically checks a plugin file: a regular
// file (or a symlink to one) of at most maxBytes, refused before it is
// read otherwise (readRegularFile).
func readModuleFile(path string, maxBytes int64) ([]byte, string, moduleShape, error) {
	b, err := readRegularFile(path, maxBytes)
	if err != nil {
		return nil, "", moduleShape{}, err
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:])
	shape, err := checkModule(b)
	return b, digest, shape, err
}

// checkModule is the static check run before compiling: wasm framing,
// required exports, and imports of fabric host functions this host has.
func checkModule(b []byte) (moduleShape, error) {
	shape, err := readModuleShape(b)
	if err != nil {
		return shape, err
	}
	for _, e := range abi.RequiredExports {
		if !slices.Contains(shape.Exports, e) {
			return shape, fmt.Errorf("%w: %s (has %v)", ErrMissingExport, e, shape.Exports)
		}
	}
	for _, imp := range shape.Imports {
		mod, name, _ := cutLast(imp, '.')
		if mod != abi.Namespace {
			if len(mod) > 12 && mod[:12] == "fabric:host/" {
				return shape, fmt.Errorf("%w: %s: this host speaks %s (ABI %s)", abi.ErrVersionMismatch, imp, abi.Namespace, abi.Version)
			}
			continue
		}
		if _, ok := abi.LookupHostFunc(name); !ok {
			return shape, fmt.Errorf("%w: %s (ABI %s)", ErrUnknownImport, imp, abi.Version)
		}
	}
	return shape, nil
}

func cutLast(s string, sep byte) (string, string, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// loadModule reads, checks, compiles and validates the plugin at path,
// and leaves one warm instance in its pool.
func loadModule(ctx context.Context, path string, lc loaderConfig) (*Module, error) {
	b, digest, shape, err := readModuleFile(path, lc.maxFileBytes)
	if err != nil {
		return nil, err
	}
	return buildModule(ctx, path, b, digest, shape, lc)
}

func buildModule(ctx context.Context, path string, b []byte, digest string, shape moduleShape, lc loaderConfig) (*Module, error) {
	// A signature is checked before any of the file's code runs.
	sig, err := lc.trust.verify(path, digest)
	if err != nil {
		return nil, err
	}
	// wazero's compile does not watch the context: a load the caller gave
	// up on (a stopping host, a CLI command interrupted) compiles nothing.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("host: load %s: %w", path, context.Cause(ctx))
	}
	start := time.Now()
	// What is compiled is the file with its data segments merged
	// (compactData); digest, signature and shape are the file's.
	wasm := compactData(b)
	m, err := compileModule(ctx, wasm, digest, abi.DefaultMaxPages, lc)
	if err != nil {
		return nil, err
	}
	m.compile = time.Since(start)
	m.path, m.sha256, m.size, m.shape = path, digest, int64(len(b)), shape
	if err := m.readManifest(ctx, lc); err != nil {
		m.Close(ctx)
		return nil, err
	}
	if err := sig.matches(m.declared); err != nil {
		m.Close(ctx)
		return nil, err
	}
	if lc.named {
		if err := checkFileName(path, m.declared.Name); err != nil {
			m.Close(ctx)
			return nil, err
		}
	}
	m.sig = sig.signature()
	if pin := lc.override(m.declared.Name).SHA256; pin != "" && pin != digest {
		m.Close(ctx)
		return nil, fmt.Errorf("%w: %s is %s, pinned %s", ErrDigestMismatch, m.declared.Name, digest, pin)
	}
	if err := m.applyGrant(lc); err != nil {
		m.Close(ctx)
		return nil, err
	}
	if m.limits.MaxPages != abi.DefaultMaxPages {
		// The memory cap is a runtime setting: recompile (a cache hit) under
		// the plugin's effective cap, then warm an instance of that.
		keep := struct {
			declared, manifest abi.Manifest
			grant              Grant
			limits             Limits
			sig                *Signature
			maxOut             int
		}{m.declared, m.manifest, m.grant, m.limits, m.sig, m.maxOut}
		// Compiled before the first is closed, so that the engine's
		// compiled module (and its machine code) carries over.
		first := m
		start = time.Now()
		m, err = compileModule(ctx, wasm, digest, keep.limits.MaxPages, lc)
		first.Close(ctx)
		if err != nil {
			return nil, err
		}
		m.compile = time.Since(start)
		m.path, m.sha256, m.size, m.shape = path, digest, int64(len(b)), shape
		m.declared, m.manifest, m.grant, m.limits, m.sig, m.maxOut = keep.declared, keep.manifest, keep.grant, keep.limits, keep.sig, keep.maxOut
		// A start function runs again here: under the load's deadline
		// too.
		pctx, cancel := context.WithTimeoutCause(ctx, lc.probeTimeout, fmt.Errorf("%w: host.load.instantiate after %s", ErrTimeout, lc.probeTimeout))
		inst, err := m.newInstance(pctx)
		cancel()
		if err != nil {
			m.Close(ctx)
			return nil, err
		}
		inst.idleSince = time.Now()
		m.pool = append(m.pool, inst)
	}
	return m, nil
}

func compileModule(ctx context.Context, b []byte, digest string, pages uint32, lc loaderConfig) (*Module, error) {
	// A call is stoppable at its deadline by the checks instrumentModule
	// adds to the plugin's loops and function entries, compiled or
	// interpreted. A module it cannot rewrite is refused: wazero's own
	// checks (CloseOnContextDone) sit at loop headers only, so a recursion
	// would run past any deadline and keep the GC from stopping the world.
	// The memory cap bounds the plugin's linear memory.
	b, err := instrumentModule(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotInterruptible, err)
	}
	rc := wazero.NewRuntimeConfig()
	if lc.interpret {
		rc = wazero.NewRuntimeConfigInterpreter()
	}
	if pages > 0 {
		rc = rc.WithMemoryLimitPages(pages)
	}
	if lc.cache != nil && !lc.interpret {
		rc = rc.WithCompilationCache(lc.cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	var codeKey uintptr
	var data *dataFile
	cm, err := func() (wazero.CompiledModule, error) {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			return nil, fmt.Errorf("wasi: %w", err)
		}
		if err := env.Instantiate(ctx, rt); err != nil {
			return nil, err
		}
		if err := instantiateInterrupt(ctx, rt); err != nil {
			return nil, fmt.Errorf("%s: %w", interruptModule, err)
		}
		hb := rt.NewHostModuleBuilder(abi.Namespace)
		for _, f := range lc.fns {
			hb.NewFunctionBuilder().WithGoModuleFunction(f.Fn, f.Params, f.Results).Export(f.Name)
		}
		if _, err := hb.Instantiate(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", abi.Namespace, err)
		}
		for {
			cm, err := rt.CompileModule(ctx, b)
			if err != nil {
				return nil, err
			}
			if !lc.interpret {
				markWazeroEntry(lc.cacheDir, b, false, time.Now())
			}
			if lc.interpret {
				return cm, nil // no machine code: the runtime's own engine holds it all
			}
			dropCodeBodies(cm)
			key, moved, err := holdCode(cm, lc.codeDir)
			if errors.Is(err, errCodeGone) {
				continue // the engine's copy was closed meanwhile: compile again
			}
			if moved != nil && lc.log != nil {
				lc.log.Debug("plugin machine code stays in anonymous memory", "error", moved)
			}
			codeKey = key
			if lc.codeDir != "" {
				d, err := fileBackData(cm, lc.codeDir)
				if err != nil && lc.log != nil {
					lc.log.Debug("plugin data segments stay on the Go heap", "error", err)
				}
				data = d
			}
			return cm, nil
		}
	}()
	if err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("host: compile: %w", err)
	}
	return &Module{rt: rt, main: cm, codeKey: codeKey, data: data, fns: lc.caller, poolSize: lc.poolSize, recycle: lc.recycle, maxOut: lc.maxOut,
		pages: pages, poolBytes: lc.poolBytes, recycleBytes: lc.recycleBytes, drained: make(chan struct{})}, nil
}

// readManifest warms an instance, reads and validates fabric_manifest, and
// keeps the instance in the pool.
func (m *Module) readManifest(ctx context.Context, lc loaderConfig) error {
	ctx, cancel := context.WithTimeoutCause(ctx, lc.probeTimeout, fmt.Errorf("%w: host.load.fabric_manifest after %s", ErrTimeout, lc.probeTimeout))
	defer cancel()
	inst, err := m.newInstance(ctx)
	if err != nil {
		return err
	}
	out, err := m.callInstance(ctx, inst, abi.ExportManifest, nil, m.fns(m, ""))
	if err != nil {
		inst.close(ctx)
		return err
	}
	var man abi.Manifest
	if err := man.UnmarshalBinary(out); err != nil {
		inst.close(ctx)
		return fmt.Errorf("%w: fabric_manifest: %w", ErrBadOutput, err)
	}
	man.ApplyDefaults()
	if err := man.Validate(); err != nil {
		inst.close(ctx)
		return err
	}
	m.declared = man
	m.manifest = applyOverride(man, lc.override(man.Name))
	inst.kernel.Config = m.manifest.Config
	inst.idleSince = time.Now()
	m.pool = append(m.pool, inst)
	return nil
}

// applyGrant refuses a plugin requesting more than its grant, and sets
// the effective limits: the timeout capped by the grant, output size from
// it. Without a grant function (Inspect) the plugin runs as it requests.
func (m *Module) applyGrant(lc loaderConfig) error {
	if lc.grant == nil {
		m.grant = GrantOf(m.declared)
		m.grant.MaxOutputBytes = lc.maxOut
	} else {
		var withheld string
		m.grant, withheld = lc.grant(m.declared.Name, m.sha256, m.Signer())
		if err := m.grant.Check(m.declared); err != nil {
			if withheld != "" {
				return fmt.Errorf("%w (%s)", err, withheld)
			}
			return err
		}
	}
	m.limits = m.grant.Limits(m.manifest)
	m.manifest.TimeoutMs = uint32(m.limits.Timeout / time.Millisecond)
	m.maxOut = m.limits.MaxOutputBytes
	return nil
}

// applyOverride applies host config to a manifest.
func applyOverride(m abi.Manifest, o PluginConfig) abi.Manifest {
	if o.Interval > 0 {
		m.IntervalMs = uint32(o.Interval / time.Millisecond)
	}
	if o.Timeout > 0 {
		m.TimeoutMs = uint32(o.Timeout / time.Millisecond)
	}
	if o.BatchSize > 0 {
		m.BatchSize = o.BatchSize
	}
	if len(o.Config) > 0 {
		cfg := make(map[string]string, len(m.Config)+len(o.Config))
		for k, v := range m.Config {
			cfg[k] = v
		}
		for k, v := range o.Config {
			cfg[k] = v
		}
		m.Config = cfg
	}
	return m
}

// newInstance instantiates the plugin with its own memories (instanceMemory)
// and Extism kernel (env.Kernel). As under Extism, no start function runs: the guest's
// runtime initialisation runs before its first call (initGuest).
func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	tail := &tailBuffer{max: 2048}
	k := env.NewKernel(uint64(m.memoryBytes()))
	k.Config = m.manifest.Config
	mem := newInstanceMemory(k, uint64(m.memoryBytes()))
	cfg := wazero.NewModuleConfig().WithStderr(tail).WithStdout(tail).WithStartFunctions().
		WithName(fmt.Sprintf("main_%d", m.seq.Add(1)))
	if m.rt == nil {
		return nil, fmt.Errorf("%w: instantiate: %s is not loaded (status only)", ErrTrap, m.manifest.Name)
	}
	mod, err := m.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, mem), m.main, cfg)
	if err != nil {
		mem.free()
		if cut := budgetOfCall(ctx).cutCause(); cut != nil {
			// Its start function used the call's CPU budget (the checks trapped it).
			return nil, fmt.Errorf("host: instantiate: %w", cut)
		}
		if ctx.Err() != nil {
			// Its start function ran past the deadline (the checks trapped it).
			return nil, fmt.Errorf("host: instantiate: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("%w: instantiate: %w", ErrTrap, err)
	}
	m.data.trim() // the segments were copied into the instance's memory
	return &instance{mod: mod, kernel: k, exports: map[string]api.Function{}, mem: mem, stderr: tail}, nil
}

// statusOnly returns a closed copy of m holding what status shows (file,
// digest, manifests, grant, limits, signature, compile time) and none of
// its wazero state. A plugin that never runs (one for the other backend)
// keeps this copy, so that its decoded module (data segments, names, the
// interpreter's function bodies: ~2 MiB a Go plugin) is released with its
// runtime. m itself is still to be closed.
func (m *Module) statusOnly() *Module {
	s := &Module{path: m.path, sha256: m.sha256, size: m.size, shape: m.shape, declared: m.declared,
		manifest: m.manifest, grant: m.grant, limits: m.limits, sig: m.sig, compile: m.compile,
		fns: m.fns, poolSize: m.poolSize, recycle: m.recycle, maxOut: m.maxOut, recycleBytes: m.recycleBytes,
		pages: m.pages, poolBytes: m.poolBytes, closed: true, drained: make(chan struct{})}
	close(s.drained)
	return s
}

// acquire marks a call in flight; false once the module is retired.
func (m *Module) acquire() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.inflight++
	return true
}

func (m *Module) release(ctx context.Context) {
	m.mu.Lock()
	m.inflight--
	done := m.retired && m.inflight == 0 && !m.closed
	m.mu.Unlock()
	if done {
		m.Close(ctx)
	}
}

// retire closes the module once no call is in flight.
func (m *Module) retire(ctx context.Context) {
	m.mu.Lock()
	m.retired = true
	done := m.inflight == 0
	m.mu.Unlock()
	if done {
		m.Close(ctx)
	}
}

// isClosed reports whether Close ran.
func (m *Module) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Close closes every pooled instance and the compiled plugin. It tries
// every closer and joins their errors.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	pool := m.pool
	m.pool = nil
	m.mu.Unlock()
	m.warms.Wait() // a replacement being started closes itself (refill)
	var errs []error
	for _, inst := range pool {
		errs = append(errs, inst.close(ctx))
	}
	errs = append(errs, m.rt.Close(ctx), releaseCode(ctx, m.codeKey, m.main))
	close(m.drained)
	return errors.Join(errs...)
}

// call runs export with input on a pooled instance; check, when set,
// validates the output before the instance goes back to the pool. An
// instance whose call failed or whose output check failed is discarded
// (its memory is returned to the system at once) and the next call makes
// a fresh one. At most
// poolCap instances are kept.
func (m *Module) call(ctx context.Context, export string, input []byte, c *hostfn.Caller, check func([]byte) error) ([]byte, error) {
	m.mu.Lock()
	var inst *instance
	if n := len(m.pool); n > 0 {
		inst, m.pool = m.pool[n-1], m.pool[:n-1]
	}
	m.codeDropped = false
	m.busy++
	m.mu.Unlock()
	defer budgetOfCall(ctx).release() // the checks may have bound the call to its thread
	defer func() {
		m.mu.Lock()
		m.busy--
		m.mu.Unlock()
	}()
	if inst == nil {
		var err error
		if inst, err = m.newInstance(ctx); err != nil {
			return nil, err
		}
	}
	out, err := m.callInstance(ctx, inst, export, input, c)
	if err == nil && check != nil {
		err = check(out)
	}
	inst.calls++
	if err != nil || inst.calls >= m.recycle || m.grown(inst) {
		m.discard(ctx, inst)
		m.refill(ctx)
		return out, err
	}
	m.mu.Lock()
	if len(m.pool) < m.poolCap() && !m.closed {
		inst.idleSince = time.Now()
		m.pool = append(m.pool, inst)
		inst = nil
	}
	m.mu.Unlock()
	if inst != nil {
		m.discard(ctx, inst)
	}
	return out, nil
}

// grown reports whether inst's linear memory grew past recycleBytes: a
// sweep that needed a large heap leaves it resident in the instance for
// good, so the instance is replaced by a fresh one.
func (m *Module) grown(inst *instance) bool {
	if m.recycleBytes <= 0 {
		return false
	}
	mem := inst.mod.Memory()
	return mem != nil && int64(mem.Size()) > m.recycleBytes
}

// refill starts a replacement instance off the call path when the pool is
// below its cap, so that the next call does not pay a guest start (tens
// of milliseconds for a Go guest) inside its timeout. The replacement
// runs the guest's runtime initialisation too; one that fails is dropped
// and the next call makes its own.
func (m *Module) refill(ctx context.Context) {
	m.mu.Lock()
	if m.closed || m.retired || len(m.pool)+m.warming >= m.poolCap() {
		m.mu.Unlock()
		return
	}
	m.warming++
	m.warms.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.warms.Done()
		wctx, cancel := context.WithTimeout(withoutCPUBudget(context.WithoutCancel(ctx)), HostProbeTimeoutDefault)
		defer cancel()
		inst, err := m.newInstance(wctx)
		if err == nil {
			if err = m.initInstance(wctx, inst); err != nil {
				inst.close(wctx)
			}
		}
		m.mu.Lock()
		m.warming--
		keep := err == nil && !m.closed && !m.retired && len(m.pool) < m.poolCap()
		if keep {
			inst.idleSince = time.Now()
			m.pool = append(m.pool, inst)
			m.codeDropped = false
		}
		m.mu.Unlock()
		if err == nil && !keep {
			inst.close(wctx)
		}
	}()
}

// discard closes inst and releases its memory.
func (m *Module) discard(ctx context.Context, inst *instance) {
	inst.close(context.WithoutCancel(ctx))
}

// close closes the instance and releases its memories, also when wazero
// already closed its module at a deadline (which keeps them).
func (inst *instance) close(ctx context.Context) error {
	err := inst.mod.Close(ctx)
	inst.mem.free()
	return err
}

// memoryBytes is the module's memory cap in bytes.
func (m *Module) memoryBytes() int64 { return int64(m.pages) << 16 }

// poolCap is how many idle instances the module keeps: PoolSize (at
// least two for a dispatcher), fewer when their memory caps would exceed
// poolBytes together (at least one).
func (m *Module) poolCap() int {
	n := m.poolSize
	if m.declared.Kind == abi.KindDispatcher {
		// Completions and its sweep may call a dispatcher at once.
		n = max(n, 2)
	}
	if m.poolBytes > 0 && m.pages > 0 {
		n = min(n, int(m.poolBytes/m.memoryBytes()))
	}
	return max(1, n)
}

// guestFatal picks the line of a Go guest's stderr that says why it died
// ("panic: ...", "fatal error: ..."), else its first line.
func guestFatal(stderr string) string {
	first := ""
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if first == "" {
			first = line
		}
		if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
			return line
		}
	}
	return first
}

// tailBuffer keeps the first max bytes written to guest stdout/stderr
// since the last Reset: a Go guest prints why it died first, then
// goroutine dumps. Safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Reset() {
	t.mu.Lock()
	t.b = t.b[:0]
	t.mu.Unlock()
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
