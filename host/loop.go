package host

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/model"
)

// LoopSpec is what drives one plugin's loop, read afresh at every sweep so
// a hot swap may change it.
type LoopSpec struct {
	// Name is the plugin name.
	Name string
	// Interval is the period of a full sweep, start to start.
	Interval time.Duration
	// BatchSize is passed to every call.
	BatchSize uint32
	// Timeout bounds one partition call.
	Timeout time.Duration
	// Family and Partitions are the partitions swept, 0..Partitions-1.
	Family     model.Family
	Partitions int
}

// plugin is the registry entry of one plugin name and the one generic
// scanner loop that drives it. The serving Module is swapped atomically at
// a partition boundary.
type plugin struct {
	h       *Host
	name    string
	mod     atomic.Pointer[Module]
	tracker *FailureTracker
	stats   hostfn.Stats
	budget  hostfn.Budget
	// fair is what the scheduler keeps of the plugin (fair.go).
	fair fairState
	// kick wakes the loop out of a quarantine wait (a new version).
	kick chan struct{}
	// offBackend: the plugin needs the backend this host does not run;
	// its modules are closed once loaded (only its status is kept).
	offBackend bool

	cancel context.CancelFunc
	done   chan struct{}

	mu              sync.Mutex
	state           State
	reason          string
	lastRun         time.Time
	lastResult      abi.ScanResult
	totals          abi.ScanResult
	calls, faults   int64
	cycles          uint64
	swaps           int
	lastSwap        time.Time
	quarantines     int
	quarantineUntil time.Time
	records         recordRing
	// fault labels the last fault (FaultKind); faultKinds counts faults
	// by label.
	fault      string
	faultKinds map[string]int64

	// wake is the plugin's due-timer state (nil with timers off).
	wake *wakeState
	// pass collects the stage timings of the timer loop's current pass
	// (nil when not timing: see stages.go).
	pass atomic.Pointer[passStages]
	// change is the plugin's candidate and kept version (shadow.go).
	change changeState
}

func (p *plugin) spec() LoopSpec {
	man := p.mod.Load().Manifest()
	fam := man.PartitionFamily()
	return LoopSpec{
		Name:       p.name,
		Interval:   time.Duration(man.IntervalMs) * time.Millisecond,
		BatchSize:  man.BatchSize,
		Timeout:    time.Duration(man.TimeoutMs) * time.Millisecond,
		Family:     fam,
		Partitions: int(p.h.cfg.Partitions.Count(fam)),
	}
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// after returns a channel that fires once d has passed on the host's
// clock (real time unless the Clock is a WaitClock), and a func releasing
// it early.
func (h *Host) after(d time.Duration) (<-chan time.Time, func()) {
	if wc, ok := h.cfg.Clock.(WaitClock); ok {
		return wc.After(d), func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// wait waits d on the host's clock or until ctx ends; false when ctx
// ended.
func (h *Host) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	ch, stop := h.after(d)
	defer stop()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
		return true
	}
}

// supervise runs the loop, restarting it after a recovered panic (a host
// bug: plugin faults never panic the host).
func (p *plugin) supervise(ctx context.Context) {
	defer close(p.done)
	log := p.h.cfg.Logger
	for restarts := 0; ; restarts++ {
		err := p.loop(ctx)
		if ctx.Err() != nil {
			return
		}
		log.Error("scanner loop panicked; restarting in 1s", "plugin", p.name, "restart_count", restarts+1, "error", err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

// loop is fabric's one scanner loop: an initial tick, then sweeps of every
// partition in order (several per plugin call, see scanPartitions), start
// to start every Interval; a fault quarantines the plugin for its backoff
// and ends the sweep.
func (p *plugin) loop(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if p.wake != nil && p.wake.timed() {
		return p.timerLoop(ctx)
	}
	clock := p.h.cfg.Clock
	for {
		if !p.waitQuarantine(ctx) {
			return nil
		}
		spec := p.spec()
		ev := p.beginCycle(clock.Now())
		cycle := ev.Cycle
		var sum abi.ScanResult
		all := make([]int, spec.Partitions)
		for i := range all {
			all[i] = i
		}
		for _, o := range p.scanPartitions(ctx, cycle, all) {
			if o.fault {
				break
			}
			sum.Add(o.res)
		}
		if ctx.Err() != nil {
			return nil
		}
		elapsed := clock.Now().Sub(ev.Start)
		ev.Duration, ev.Result = elapsed, sum
		p.h.observeSweep(ev)
		p.cycleSettled(cycle, sum, elapsed)
		// Re-read the interval: a swap during the sweep may have changed it.
		if !p.waitKick(ctx, p.spec().Interval-elapsed) {
			return nil
		}
	}
}

// waitKick waits d on the host's clock, or until a fixed version is
// swapped in over a quarantined one; false when ctx ended.
func (p *plugin) waitKick(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	ch, stop := p.h.after(d)
	defer stop()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
	case <-p.kick:
	}
	return true
}

func (p *plugin) quarantinedUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != StateQuarantined {
		return time.Time{}
	}
	return p.quarantineUntil
}

// scanPartition makes one call on partition i of sweep cycle, when this
// host may (it holds the partition's lease, or leases are off). It reports
// whether the call was a fault (trap, timeout, bad output) and whether it
// ran at all.
func (p *plugin) scanPartition(ctx context.Context, cycle uint64, i int) (res abi.ScanResult, fault, ran bool) {
	m := p.mod.Load()
	for !m.acquire() { // retired and closed between Load and acquire
		m = p.mod.Load()
	}
	defer m.release(context.WithoutCancel(ctx))
	man := m.Manifest()
	part := model.Partition{Family: man.PartitionFamily(), Index: uint16(i)}
	timeout := time.Duration(man.TimeoutMs) * time.Millisecond
	// The turn first, then the grant: waiting for a turn spends neither
	// the call's timeout nor its lease.
	t, ok := p.slot(ctx)
	if !ok {
		return res, true, true // the host is stopping
	}
	grant, ok := p.h.beginPartition(part, timeout)
	if !ok {
		t.done(0, nil)
		return res, false, false // another host's, or being handed off
	}
	defer grant.End()
	req := abi.ScanRequest{
		Cycle: cycle, Partition: part, Partitions: p.h.cfg.Partitions.Count(part.Family),
		BatchSize: man.BatchSize, DeadlineMs: man.TimeoutMs,
	}
	in, _ := req.MarshalBinary()
	rec := CycleRecord{Plugin: p.name, Version: man.Version, SHA256: m.sha256, Partition: i, Cycle: cycle,
		Host: grant.Host, Token: grant.Token, Start: p.h.cfg.Clock.Now(), Wait: t.wait, Probation: t.probation}
	caller := p.caller(m, part.Tag())
	p.stagesCalled(part.Tag())

	_, err := p.invoke(ctx, m, abi.ExportScan, in, caller, timeout, grant.Deadline, t, func(out []byte) error {
		if derr := res.UnmarshalBinary(out); derr != nil {
			return fmt.Errorf("%w: %w", ErrBadOutput, derr)
		}
		return nil
	})
	rec.End = p.h.cfg.Clock.Now()
	if err != nil && ctx.Err() != nil {
		return res, true, true // the host is stopping: neither a record nor a fault
	}
	fault = p.settle([]CycleRecord{rec}, []abi.ScanResult{res}, err)
	return res, fault, true
}

// invoke makes one call of export on m, holding the turn t (ended here):
// its deadline (timeout, or the turn's cut on probation, capped by
// leaseDeadline) starts now; check
// validates the output before the instance is pooled again; a call that
// spent its host-call budget is a fault (over budget) whatever it
// returned.
func (p *plugin) invoke(ctx context.Context, m *Module, export string, in []byte, caller *hostfn.Caller,
	timeout time.Duration, leaseDeadline time.Time, t turn, check func([]byte) error) ([]byte, error) {
	shadow := p.shadowBefore(ctx, export, in, caller, timeout, leaseDeadline) // in this turn, before the live call
	start := time.Now()
	timeout, why := t.cut(timeout)
	cctx, cancel := p.h.callContext(ctx, timeout, leaseDeadline, "plugin."+p.name+"."+export+why, p.fair.proven())
	out, err := m.call(cctx, export, in, caller, check)
	cancel()
	if berr := caller.OverBudget(); berr != nil && (err == nil || FaultKind(err) == "") {
		err = fmt.Errorf("%w: %s: %w", ErrOverBudget, export, berr)
	}
	t.done(time.Since(start), err)
	shadow.after(err)
	return out, err
}

// settle books one finished plugin call that scanned the partitions of
// recs (each record's identity, host, token and times filled in):
// results[i] is recs[i]'s result when err is nil. It keeps the records,
// counts a scan per partition and at most one fault per call, quarantines
// the plugin on a fault (whatever cut it: its CPU time, its wall cap or
// its leases' deadline — but a starved call, errStarved, is no fault),
// signals each record, and reports whether it faulted.
func (p *plugin) settle(recs []CycleRecord, results []abi.ScanResult, err error) (fault bool) {
	fault = isFault(err)
	p.mu.Lock()
	if len(recs) > 0 {
		p.lastRun = recs[len(recs)-1].End
	}
	if fault {
		p.countFault(err)
	}
	for i := range recs {
		p.calls++
		if err != nil {
			recs[i].Error = err.Error()
		} else {
			recs[i].Result = results[i]
			p.lastResult = results[i]
			p.totals.Add(results[i])
		}
		p.records.add(recs[i])
	}
	if err == nil {
		p.quarantines = 0
		if p.state == StateQuarantined {
			p.state, p.reason = StateRunning, ""
		}
	}
	p.mu.Unlock()
	if fault {
		p.quarantine(err)
	}
	for _, r := range recs {
		p.h.cfg.TestSignals.partitionDone(r)
	}
	return fault
}

func (p *plugin) caller(m *Module, tag string) *hostfn.Caller {
	man := m.Manifest()
	c := &hostfn.Caller{
		Plugin: p.name, Version: man.Version, Caps: &man.Capabilities, Tag: tag,
		Tracker: p.tracker, Stats: &p.stats, Logger: p.h.cfg.Logger, Budget: &p.budget,
	}
	if w := p.wake; w != nil {
		clock := p.h.cfg.Clock
		c.OnNow = func(ms int64) { w.sawServerTime(ms, clock.Now()) }
		c.OnFCall = p.stagesFCall
	}
	return c
}

// quarantine parks the plugin for 2^n × base ±10 %, n counting
// consecutive quarantines and restarting after 7.
func (p *plugin) quarantine(err error) {
	p.mu.Lock()
	n := p.quarantines % quarantineSteps
	p.quarantines++
	d := p.h.cfg.QuarantineBase << n
	d += time.Duration((rand.Float64()*0.2 - 0.1) * float64(d))
	p.state = StateQuarantined
	p.reason = reasonOf(err)
	p.fault = FaultKind(err)
	p.quarantineUntil = p.h.cfg.Clock.Now().Add(d)
	p.mu.Unlock()
	p.h.cfg.Logger.Error("plugin quarantined", "plugin", p.name, "version", p.mod.Load().Manifest().Version, "retry_in_ms", d.Milliseconds(), "error", err)
	p.h.statusChanged(true)
	p.h.cfg.TestSignals.quarantined(p.status())
}

// countFault counts a fault by its label; p.mu is held.
func (p *plugin) countFault(err error) {
	p.faults++
	kind := cmp.Or(FaultKind(err), FaultTrap)
	if p.faultKinds == nil {
		p.faultKinds = map[string]int64{}
	}
	p.faultKinds[kind]++
}

// reasonOf labels a fault for people: "<kind>: <error>".
func reasonOf(err error) string {
	if k := FaultKind(err); k != "" {
		return k + ": " + err.Error()
	}
	return err.Error()
}

func (p *plugin) status() PluginStatus {
	m := p.mod.Load()
	man := m.Manifest()
	req, grant, lim := m.declared.Capabilities, m.grant, m.limits
	instances, idle := m.instances(), p.h.idleAfter(p, m)
	p.mu.Lock()
	defer p.mu.Unlock()
	return PluginStatus{
		Requested: &req, Granted: &grant, Limits: &lim, Signer: m.Signer(),
		Name: p.name, Version: man.Version, Kind: man.Kind, ABI: man.ABI, SHA256: m.sha256, Path: m.path,
		State: p.state, Reason: p.reason, Released: p.offBackend && m.isClosed() && m.rt == nil, IntervalMs: man.IntervalMs,
		Partitions: int(p.h.cfg.Partitions.Count(man.PartitionFamily())),
		LastRun:    p.lastRun, LastResult: p.lastResult, Totals: p.totals,
		Calls: p.calls, Faults: p.faults, HostCalls: p.stats.HostCalls.Load(), Denied: p.stats.Denied.Load(),
		LastDenial: p.stats.LastDenial(), Cycles: p.cycles, Swaps: p.swaps, LastSwap: p.lastSwap, QuarantineUntil: p.quarantineUntil,
		Metrics: p.stats.Metrics(), MetricGauges: p.stats.Gauges(),
		MetricsDropped: p.stats.MetricsDropped.Load(), LogLinesDropped: p.stats.LogLinesDropped.Load(), LogBytesDropped: p.stats.LogBytesDropped.Load(),
		Fault: p.fault, FaultKinds: maps.Clone(p.faultKinds),
		Commands: p.budget.Commands.Load(), OverBudget: p.budget.Refused.Load(),
		Shadow: p.change.shadowStatus(), Previous: p.change.previous(),
		Instances: instances, IdleReleaseMs: idle.Milliseconds(), IdleReleases: m.idleReleases.Load(),
	}
}

func (s *TestSignals) partitionDone(r CycleRecord) {
	if s != nil {
		s.PartitionDone.Signal(r)
	}
}

func (s *TestSignals) quarantined(st PluginStatus) {
	if s != nil {
		s.Quarantined.Signal(st)
	}
}

func (s *TestSignals) loaded(st PluginStatus) {
	if s != nil {
		s.Loaded.Signal(st)
	}
}

func (s *TestSignals) rejected(f FileStatus) {
	if s != nil {
		s.Rejected.Signal(f)
	}
}
