package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/model"
)

// Safe change: shadow runs, promote and roll back.
//
// A shadow is a candidate version of a live plugin, loaded beside it
// (LoadShadow, or a file in the plugin directory's shadow/ subdirectory
// at start). On each of the live plugin's partition calls the host first
// calls the candidate with the same request, inside the live call's turn
// of the fair scheduler (it takes no slot of its own, so it never makes
// another plugin wait longer than the live call would; it is cut at its
// own timeout, at ProbationTimeout after a fault of its own, and early
// enough to leave the live call its whole timeout within its partition
// leases, or three quarters of their time when they hold less). The candidate's reads are real; its writes (mutating FCALLs,
// write ops, writing SQL) are recorded and answered abi.StatusDryRun or
// abi.CodeDryRun, never sent. Then the live call runs with its writes
// recorded, and the host compares the two lists of actions (function,
// execution, normalised arguments): ShadowStatus counts them and keeps
// samples of the differences. A candidate reads the state the live call
// is about to act on, so the two agree unless they decide differently
// (or the workload changed the partition in the milliseconds between).
//
// When the live version runs no sweeps (disabled), the candidate sweeps
// alone on its own interval, each partition call taking a turn of the
// scheduler; every action it meant is one the live version did not take.
//
// Promote makes the candidate live by the hot swap's atomic module swap
// (at a call boundary: calls in flight finish on the old version, the
// next call of every partition runs the new one) and keeps the old
// version; Rollback swaps it back.

// ErrNoShadow is matched by Promote, Unshadow and ShadowDiff of a plugin
// without a candidate, and by Rollback of one without a kept version.
var ErrNoShadow = errors.New("host: no candidate version")

// ErrNoPlugin is matched by the safe-change calls naming no live plugin.
var ErrNoPlugin = errors.New("host: no live plugin of that name")

// shadowSamples is how many differences a shadow keeps.
const shadowSamples = 50

// ShadowDir is the subdirectory of the plugin directory whose *.wasm
// files are loaded as candidates at start.
const ShadowDir = "shadow"

// ShadowStatus is a candidate version's record beside its live plugin.
type ShadowStatus struct {
	Version string    `json:"version"`
	SHA256  string    `json:"sha256"`
	Path    string    `json:"path"`
	Since   time.Time `json:"since"`
	// Solo: the live version runs no sweeps; the candidate sweeps alone.
	Solo bool `json:"solo,omitempty"`
	// Calls counts candidate calls compared with a live call (or, solo,
	// made); AgreeingCalls those whose actions were the same.
	Calls         int64 `json:"calls"`
	AgreeingCalls int64 `json:"agreeing_calls"`
	// Agree counts actions both versions took; OnlyLive those only the
	// live version took, OnlyCandidate those only the candidate meant to.
	// Disagree is OnlyLive + OnlyCandidate.
	Agree         int64 `json:"agree"`
	Disagree      int64 `json:"disagree"`
	OnlyLive      int64 `json:"only_live"`
	OnlyCandidate int64 `json:"only_candidate"`
	// DryRuns counts the writes recorded and not sent.
	DryRuns int64 `json:"dry_runs"`
	// Skipped counts live calls not compared: the partition's leases had
	// ended, or the live call faulted (nothing to compare).
	Skipped int64 `json:"skipped"`
	// Faults counts the candidate's failed calls; LastError is the latest.
	Faults    int64  `json:"faults"`
	LastError string `json:"last_error,omitempty"`
	// Samples are the latest differences, oldest first.
	Samples []ShadowDiff `json:"samples,omitempty"`
}

// AgreeRatio is Agree / (Agree + Disagree), 1 when neither acted.
func (s ShadowStatus) AgreeRatio() float64 {
	if s.Agree+s.Disagree == 0 {
		return 1
	}
	return float64(s.Agree) / float64(s.Agree+s.Disagree)
}

// ShadowDiff is one action only one version took.
type ShadowDiff struct {
	At        time.Time `json:"at"`
	Partition string    `json:"partition"`
	// Side is "live" (only the live version did it) or "candidate" (only
	// the candidate meant to).
	Side   string        `json:"side"`
	Action hostfn.Action `json:"action"`
}

// changeState is one plugin's candidate and kept previous version.
type changeState struct {
	mu   sync.Mutex
	cand *Module
	// prev is the version a Promote replaced, kept for Rollback.
	prev *Module
	st   ShadowStatus
	// stopSolo ends the candidate's own sweeps (nil: none).
	stopSolo context.CancelFunc
	soloDone chan struct{}
	stats    hostfn.Stats
}

// shadowRegistry is the host's part: the context solo sweeps run under.
type shadowRegistry struct {
	mu  sync.Mutex
	ctx context.Context
}

// startShadows keeps ctx for solo sweeps and loads the candidates of the
// shadow/ subdirectory.
func (h *Host) startShadows(ctx context.Context) {
	h.shadows.mu.Lock()
	h.shadows.ctx = ctx
	h.shadows.mu.Unlock()
	paths, _ := filepath.Glob(filepath.Join(h.cfg.PluginDir, ShadowDir, "*.wasm"))
	sort.Strings(paths)
	for _, path := range paths {
		if ctx.Err() != nil {
			return
		}
		if _, err := h.loadShadow(ctx, path, true); err != nil {
			h.cfg.Logger.Warn("shadow candidate rejected", "path", path, "error", err)
		}
	}
}

func (h *Host) livePlugin(name string) (*plugin, error) {
	h.mu.Lock()
	p := h.plugins[name]
	h.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoPlugin, name)
	}
	return p, nil
}

// LoadShadow loads the plugin file at path as the candidate version of
// the live plugin of its name (replacing an earlier candidate), under
// that name's grant. It returns the plugin's name. The caller chose the
// file: its name may differ from its plugin's (a file of the shadow/
// subdirectory, loaded at start, may not).
func (h *Host) LoadShadow(ctx context.Context, path string) (string, error) {
	return h.loadShadow(ctx, path, false)
}

// loadShadow is LoadShadow; named refuses a file not named after its
// plugin (ErrNameMismatch).
func (h *Host) loadShadow(ctx context.Context, path string, named bool) (string, error) {
	lc := h.lc
	lc.named = named
	m, err := loadModule(ctx, path, lc)
	if err != nil {
		return "", err
	}
	man := m.Manifest()
	p, err := h.livePlugin(man.Name)
	if err == nil && p.offBackend {
		err = fmt.Errorf("host: %s needs a backend this host does not run", man.Name)
	}
	if err == nil && man.Kind != abi.KindScanner && !man.Sweeps() {
		err = fmt.Errorf("host: %s is a %s that does not sweep: only sweeps are shadowed", man.Name, man.Kind)
	}
	if err != nil {
		m.Close(ctx)
		return "", err
	}
	c := &p.change
	c.mu.Lock()
	old := c.cand
	stop, done := c.stopSolo, c.soloDone
	c.cand, c.stopSolo, c.soloDone = m, nil, nil
	c.st = ShadowStatus{Version: man.Version, SHA256: m.sha256, Path: path, Since: h.cfg.Clock.Now()}
	c.stats = hostfn.Stats{}
	c.mu.Unlock()
	endSolo(stop, done)
	if old != nil {
		old.retire(context.WithoutCancel(ctx))
	}
	select {
	case <-p.done: // the live version runs no sweeps: the candidate sweeps alone
		h.startSolo(p, m)
	default:
	}
	live := p.mod.Load().Manifest()
	h.cfg.Logger.Info("shadow loaded", "plugin", man.Name, "live_version", live.Version, "candidate_version", man.Version, "sha256", m.sha256, "path", path)
	h.statusChanged(true)
	return man.Name, nil
}

func endSolo(stop context.CancelFunc, done chan struct{}) {
	if stop != nil {
		stop()
		<-done
	}
}

// Unshadow drops the candidate of plugin name.
func (h *Host) Unshadow(ctx context.Context, name string) error {
	p, err := h.livePlugin(name)
	if err != nil {
		return err
	}
	c := &p.change
	c.mu.Lock()
	cand, stop, done := c.cand, c.stopSolo, c.soloDone
	c.cand, c.stopSolo, c.soloDone = nil, nil, nil
	c.mu.Unlock()
	if cand == nil {
		return fmt.Errorf("%w: %s has no shadow", ErrNoShadow, name)
	}
	endSolo(stop, done)
	cand.retire(context.WithoutCancel(ctx))
	h.forgetShadowFile(name, cand.path)
	h.cfg.Logger.Info("shadow dropped", "plugin", name)
	h.statusChanged(true)
	return nil
}

// ShadowDiff returns the record of plugin name's candidate.
func (h *Host) ShadowDiff(name string) (ShadowStatus, error) {
	p, err := h.livePlugin(name)
	if err != nil {
		return ShadowStatus{}, err
	}
	st := p.change.shadowStatus()
	if st == nil {
		return ShadowStatus{}, fmt.Errorf("%w: %s has no shadow", ErrNoShadow, name)
	}
	return *st, nil
}

// Promote makes plugin name's candidate its live version at the next
// call boundary (the hot swap's module swap) and keeps the version it
// replaces for Rollback. It returns the new live version.
func (h *Host) Promote(ctx context.Context, name string) (string, error) {
	p, err := h.livePlugin(name)
	if err != nil {
		return "", err
	}
	c := &p.change
	c.mu.Lock()
	cand, stop, done, prev := c.cand, c.stopSolo, c.soloDone, c.prev
	if cand == nil {
		c.mu.Unlock()
		return "", fmt.Errorf("%w: %s has no shadow to promote", ErrNoShadow, name)
	}
	c.cand, c.stopSolo, c.soloDone = nil, nil, nil
	c.mu.Unlock()
	endSolo(stop, done)
	old := h.swapLive(p, cand, "promoted")
	c.mu.Lock()
	c.prev = old
	c.mu.Unlock()
	if prev != nil {
		prev.retire(context.WithoutCancel(ctx))
	}
	return cand.Manifest().Version, nil
}

// Rollback makes the version the last Promote replaced live again at the
// next call boundary, and drops the version it replaces. Without one, it
// admits the older signed file of plugin name that was refused as a
// downgrade (ErrDowngrade): the operator's explicit rollback. It returns
// the version now live.
func (h *Host) Rollback(ctx context.Context, name string) (string, error) {
	p, err := h.livePlugin(name)
	var prev *Module
	if err == nil {
		c := &p.change
		c.mu.Lock()
		prev = c.prev
		c.prev = nil
		c.mu.Unlock()
	}
	if prev == nil {
		v, ok, aerr := h.admitDowngrade(ctx, name)
		switch {
		case ok:
			return v, aerr
		case err != nil:
			return "", err
		}
		return "", fmt.Errorf("%w: %s has no previous version kept (nothing promoted, no older signed file refused)", ErrNoShadow, name)
	}
	old := h.swapLive(p, prev, "rolled back")
	old.retire(context.WithoutCancel(ctx))
	return prev.Manifest().Version, nil
}

// swapLive installs m as p's live version as a hot swap does (loadPath)
// and returns the version it replaced, which stays open.
func (h *Host) swapLive(p *plugin, m *Module, what string) *Module {
	man := m.Manifest()
	h.mu.Lock()
	old := h.installLocked(p, m)
	h.markVersion(m) // the operator chose it: the newest run, older or not
	h.mu.Unlock()
	h.cfg.Logger.Info("plugin "+what, "plugin", p.name, "old_version", old.Manifest().Version, "new_version", man.Version, "sha256", m.sha256, "path", m.path)
	h.statusChanged(true)
	h.cfg.TestSignals.loaded(p.status())
	return old
}

// shadowStatus returns a copy of the candidate's record (nil: none).
func (c *changeState) shadowStatus() *ShadowStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cand == nil {
		return nil
	}
	st := c.st
	st.Samples = append([]ShadowDiff(nil), c.st.Samples...)
	return &st
}

// previous names the version kept for Rollback ("" : none).
func (c *changeState) previous() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prev == nil {
		return ""
	}
	return c.prev.Manifest().Version + " " + c.prev.sha256
}

// close retires the candidate and the kept version (the host stops).
func (c *changeState) close(ctx context.Context) {
	c.mu.Lock()
	cand, prev, stop, done := c.cand, c.prev, c.stopSolo, c.soloDone
	c.cand, c.prev, c.stopSolo, c.soloDone = nil, nil, nil, nil
	c.mu.Unlock()
	endSolo(stop, done)
	for _, m := range []*Module{cand, prev} {
		if m != nil {
			m.retire(ctx)
		}
	}
}

// pendingShadow is one candidate call waiting for the live call it is
// compared with.
type pendingShadow struct {
	p    *plugin
	m    *Module
	tag  string
	acts []hostfn.Action
	live *hostfn.ActionLog
}

// shadowBefore runs plugin p's candidate (if any) on the request of the
// live call about to be made, and arranges for the live call's writes to
// be recorded in caller. It returns nil when nothing is to be compared.
// timeout is the live call's, leaseDeadline its leases' deadline.
func (p *plugin) shadowBefore(ctx context.Context, export string, in []byte, caller *hostfn.Caller, timeout time.Duration, leaseDeadline time.Time) *pendingShadow {
	if export != abi.ExportScan && export != abi.ExportScanBatch {
		return nil
	}
	c := &p.change
	c.mu.Lock()
	cand := c.cand
	c.mu.Unlock()
	if cand == nil || !cand.acquire() {
		return nil
	}
	defer cand.release(context.WithoutCancel(ctx))
	var deadline time.Time
	if !leaseDeadline.IsZero() {
		// Leave the live call its whole timeout within its leases, or
		// when they hold less than that (the host grants a call half the
		// lease TTL), three quarters of what they hold.
		now := p.h.cfg.Clock.Now()
		room := leaseDeadline.Sub(now)
		deadline = now.Add(max(room-timeout, room/4))
		if room <= 0 {
			c.count(func(st *ShadowStatus) { st.Skipped++ })
			return nil
		}
	}
	// Both calls read one server time: an item falling due between them
	// is not a difference. (The live call's reading is as old as the
	// candidate's call: what it acts on is due by then, and its FCALLs
	// check their own time.)
	var now int64
	if p.h.cfg.Now != nil {
		if ms, err := p.h.cfg.Now(ctx); err == nil {
			now = ms
		}
	}
	acts, err := p.callCandidate(ctx, cand, export, in, caller.Tag, caller.Batch, deadline, now)
	if err != nil {
		return nil
	}
	caller.Actions = &hostfn.ActionLog{}
	caller.FixedNow = now
	return &pendingShadow{p: p, m: cand, tag: caller.Tag, acts: acts, live: caller.Actions}
}

// after compares the candidate's actions with the live call's; liveErr
// is the live call's error (a failed live call is not compared).
func (s *pendingShadow) after(liveErr error) {
	if s == nil {
		return
	}
	c := &s.p.change
	if liveErr != nil {
		c.count(func(st *ShadowStatus) { st.Skipped++ })
		return
	}
	c.compare(s.m, s.p.h.cfg.Clock.Now(), s.tag, s.live.Actions(), s.acts)
}

// callCandidate calls export of cand on in as a dry run and returns the
// actions it meant. A fault is counted; the candidate's next calls are
// then cut at ProbationTimeout.
func (p *plugin) callCandidate(ctx context.Context, cand *Module, export string, in []byte, tag string, batch map[uint16]string, deadline time.Time, now int64) ([]hostfn.Action, error) {
	c := &p.change
	man := cand.Manifest()
	log := &hostfn.ActionLog{DryRun: true}
	var budget hostfn.Budget
	budget.SetLimits(budgetOf(cand.Limits()))
	sc := &hostfn.Caller{
		Plugin: p.name, Version: man.Version, Caps: &man.Capabilities, Tag: tag,
		Tracker: hostfn.ReadOnlyTracker{T: p.tracker}, Stats: &c.stats, Logger: p.h.cfg.Logger,
		Budget: &budget, Batch: maps.Clone(batch), Actions: log, FixedNow: now,
	}
	timeout := time.Duration(man.TimeoutMs) * time.Millisecond
	c.mu.Lock()
	if c.st.Faults > 0 && c.st.LastError != "" {
		timeout = min(timeout, p.h.cfg.ProbationTimeout)
	}
	c.mu.Unlock()
	cctx, cancel := p.h.callContext(ctx, timeout, deadline, "shadow."+p.name+"."+export, false)
	_, err := cand.call(cctx, export, in, sc, nil)
	cancel()
	if berr := sc.OverBudget(); berr != nil && err == nil {
		err = fmt.Errorf("%w: %s: %w", ErrOverBudget, export, berr)
	}
	if err != nil {
		if ctx.Err() == nil {
			p.h.cfg.Logger.Warn("shadow call failed", "plugin", p.name, "candidate_version", man.Version, "partition", tag, "error", err)
			c.count(func(st *ShadowStatus) { st.Faults++; st.LastError = reasonOf(err) })
		}
		return nil, err
	}
	c.count(func(st *ShadowStatus) { st.LastError = "" })
	return log.Actions(), nil
}

func (c *changeState) count(f func(*ShadowStatus)) {
	c.mu.Lock()
	if c.cand != nil {
		f(&c.st)
	}
	c.mu.Unlock()
}

// compare books one compared call: the actions live took and cand meant,
// both sorted. A candidate replaced since the call is not booked.
func (c *changeState) compare(cand *Module, at time.Time, tag string, live, meant []hostfn.Action) {
	var onlyLive, onlyCand []hostfn.Action
	agree := 0
	i, j := 0, 0
	for i < len(live) || j < len(meant) {
		switch {
		case j == len(meant) || (i < len(live) && live[i].String() < meant[j].String()):
			onlyLive = append(onlyLive, live[i])
			i++
		case i == len(live) || meant[j].String() < live[i].String():
			onlyCand = append(onlyCand, meant[j])
			j++
		default:
			agree++
			i++
			j++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cand != cand {
		return
	}
	st := &c.st
	st.Calls++
	st.DryRuns += int64(len(meant))
	st.Agree += int64(agree)
	st.OnlyLive += int64(len(onlyLive))
	st.OnlyCandidate += int64(len(onlyCand))
	st.Disagree = st.OnlyLive + st.OnlyCandidate
	if len(onlyLive)+len(onlyCand) == 0 {
		st.AgreeingCalls++
	}
	for _, side := range []struct {
		name string
		acts []hostfn.Action
	}{{"live", onlyLive}, {"candidate", onlyCand}} {
		for _, a := range side.acts {
			st.Samples = append(st.Samples, ShadowDiff{At: at, Partition: tag, Side: side.name, Action: a})
		}
	}
	if n := len(st.Samples); n > shadowSamples {
		st.Samples = append([]ShadowDiff(nil), st.Samples[n-shadowSamples:]...)
	}
}

// startSolo sweeps cand alone while p's live version runs no sweeps.
func (h *Host) startSolo(p *plugin, cand *Module) {
	h.shadows.mu.Lock()
	parent := h.shadows.ctx
	h.shadows.mu.Unlock()
	if parent == nil {
		return // not started: startShadows starts it
	}
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	c := &p.change
	c.mu.Lock()
	if c.cand != cand {
		c.mu.Unlock()
		cancel()
		return
	}
	c.stopSolo, c.soloDone = cancel, done
	c.st.Solo = true
	c.mu.Unlock()
	go func() {
		defer close(done)
		for cycle := uint64(1); ; cycle++ {
			start := h.cfg.Clock.Now()
			if !p.soloSweep(ctx, cand, cycle) {
				return
			}
			interval := time.Duration(cand.Manifest().IntervalMs) * time.Millisecond
			if !h.wait(ctx, interval-h.cfg.Clock.Now().Sub(start)) {
				return
			}
		}
	}()
}

// soloSweep calls cand once on every partition this host holds, each in a
// turn of the scheduler; false when ctx ended.
func (p *plugin) soloSweep(ctx context.Context, cand *Module, cycle uint64) bool {
	if !cand.acquire() {
		return false
	}
	defer cand.release(context.WithoutCancel(ctx))
	man := cand.Manifest()
	fam := man.PartitionFamily()
	n := p.h.cfg.Partitions.Count(fam)
	timeout := time.Duration(man.TimeoutMs) * time.Millisecond
	for i := range int(n) {
		part := model.Partition{Family: fam, Index: uint16(i)}
		c := &p.change
		c.mu.Lock()
		faulted := c.st.LastError != ""
		c.mu.Unlock()
		hold := p.h.sched.acquire(ctx, faulted, true)
		if hold == nil {
			return false
		}
		grant, ok := p.h.beginPartition(part, timeout)
		if !ok {
			p.h.sched.release(hold)
			continue
		}
		req := abi.ScanRequest{Cycle: cycle, Partition: part, Partitions: n, BatchSize: man.BatchSize, DeadlineMs: man.TimeoutMs}
		in, _ := req.MarshalBinary()
		acts, err := p.callCandidate(ctx, cand, abi.ExportScan, in, part.Tag(), nil, grant.Deadline, 0)
		grant.End()
		p.h.sched.release(hold)
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			c.compare(cand, p.h.cfg.Clock.Now(), part.Tag(), nil, acts)
		}
	}
	return true
}

// forgetShadowFile removes a dropped candidate's file (and its .sig) when
// it lives in the plugin directory's shadow/ subdirectory, where
// startShadows would load it again at the next start; a candidate loaded
// from elsewhere (LoadShadow of the operator's own path) is left alone.
func (h *Host) forgetShadowFile(name, path string) {
	dir, err := filepath.Abs(filepath.Join(h.cfg.PluginDir, ShadowDir))
	if err != nil {
		return
	}
	abs, err := filepath.Abs(path)
	if err != nil || filepath.Dir(abs) != dir {
		return
	}
	for _, f := range []string{abs, abs + ".sig"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			h.cfg.Logger.Warn("shadow dropped but its file stays (it loads again at the next start)",
				"plugin", name, "path", f, "error", err)
		}
	}
}

// shadowFileName is where an uploaded candidate of plugin name is kept.
func (h *Host) shadowFileName(name string) string {
	return filepath.Join(h.cfg.PluginDir, ShadowDir, name+".wasm")
}

// LoadShadowBytes writes an uploaded candidate into the shadow/
// subdirectory of the plugin directory (so that it survives a restart)
// and loads it as LoadShadow does. The file is named after the plugin
// the bytes declare, once they validated.
func (h *Host) LoadShadowBytes(ctx context.Context, wasm []byte) (string, error) {
	dir := filepath.Join(h.cfg.PluginDir, ShadowDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("host: shadow directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".upload-*.wasm")
	if err != nil {
		return "", fmt.Errorf("host: shadow upload: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(wasm); err != nil {
		tmp.Close()
		return "", fmt.Errorf("host: shadow upload: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("host: shadow upload: %w", err)
	}
	in, err := Inspect(ctx, tmp.Name(), InspectConfig{CacheDir: h.cfg.CacheDir, TrustedKeys: h.cfg.TrustedKeys, RequireSigned: h.cfg.RequireSigned})
	if err != nil {
		return "", err
	}
	final := h.shadowFileName(in.Manifest.Name)
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("host: shadow upload: %w", err)
	}
	return h.loadShadow(ctx, final, true)
}
