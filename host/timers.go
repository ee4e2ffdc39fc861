package host

import (
	"context"
	"errors"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// TimerConfig configures due-time timers: a due-index scanner reports the
// earliest due score it saw (abi.ScanResult.NextDueMs), the host sleeps
// that partition until then, and a ZADD to one of the plugin's wake
// indexes (manifest config pdk.ConfigWake) wakes the partition at once.
// Polling stays as the safety net. The zero value runs timers.
//
// # Notes
//
//   - Wake-ups come from Valkey keyspace notifications (keyevent "zadd"
//     on the backend's database), so the host turns on the E and z flags
//     of notify-keyspace-events at start unless NoConfigSet is set (then
//     the operator must).
//   - While the notification subscription is down, partitions are polled
//     at the plugin's interval, as without timers; while it is up, a
//     partition with nothing known due is polled every SafetyInterval.
type TimerConfig struct {
	// Disabled turns timers off: every scanner sweeps all partitions every
	// interval (FlowFabric's fixed polling).
	Disabled bool
	// SafetyFactor: with the subscription up, a partition with nothing
	// known due is polled every SafetyFactor × the plugin's interval
	// (default 10).
	SafetyFactor int
	// NoConfigSet: do not CONFIG SET notify-keyspace-events.
	NoConfigSet bool
}

// TimerSafetyFactorDefault is TimerConfig.SafetyFactor's default.
const TimerSafetyFactorDefault = 10

// timerRetryDelay is the pause before the notification subscription is
// retried after it fails.
const timerRetryDelay = time.Second

// wakeState is a plugin's share of the timers: the partitions woken since
// its loop last looked, and a channel that nudges the loop.
type wakeState struct {
	mu       sync.Mutex
	woken    map[int]time.Time // partition → when its first wake since the last take arrived
	all      time.Time         // when a wake of every partition arrived (zero: none)
	ch       chan struct{}
	patterns []string

	serverMs atomic.Int64 // last server time the plugin read
	hostAt   atomic.Int64 // host clock (unix ns) when it read it
}

func newWakeState(m abi.Manifest) *wakeState {
	w := &wakeState{woken: map[int]time.Time{}, ch: make(chan struct{}, 1)}
	w.setPatterns(m)
	return w
}

func (w *wakeState) setPatterns(m abi.Manifest) {
	var pats []string
	for _, p := range strings.Split(m.Config[pdk.ConfigWake], ",") {
		if p = strings.TrimSpace(p); p != "" {
			pats = append(pats, p)
		}
	}
	w.mu.Lock()
	w.patterns = pats
	w.mu.Unlock()
}

func (w *wakeState) timed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.patterns) > 0
}

func (w *wakeState) matches(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.patterns {
		if ok, _ := path.Match(p, key); ok {
			return true
		}
	}
	return false
}

// wake marks partition i (or every partition when i < 0) woken at at and
// nudges the loop.
func (w *wakeState) wake(i int, at time.Time) {
	w.mu.Lock()
	if i < 0 {
		if w.all.IsZero() {
			w.all = at
		}
	} else if _, ok := w.woken[i]; !ok {
		w.woken[i] = at
	}
	w.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// take returns and clears the woken partitions: out[i] is when partition
// i was first woken since the last take (zero: not woken).
func (w *wakeState) take(n int) []time.Time {
	out := make([]time.Time, n)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, at := range w.woken {
		if i < n {
			out[i] = at
		}
	}
	if !w.all.IsZero() {
		for i := range out {
			if out[i].IsZero() || w.all.Before(out[i]) {
				out[i] = w.all
			}
		}
	}
	clear(w.woken)
	w.all = time.Time{}
	return out
}

// sawServerTime records a server-time read of the plugin.
func (w *wakeState) sawServerTime(ms int64, at time.Time) {
	w.serverMs.Store(ms)
	w.hostAt.Store(at.UnixNano())
}

// dueAt converts a server due time into host clock time, using the last
// server-time read as the offset.
func (w *wakeState) dueAt(dueMs int64) (time.Time, bool) {
	ms, at := w.serverMs.Load(), w.hostAt.Load()
	if ms == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, at).Add(time.Duration(dueMs-ms) * time.Millisecond), true
}

// timerLoop drives a plugin with wake patterns: each partition is scanned
// when its timer is due or it is woken; a full sweep still counts as one
// failure-tracker cycle per interval.
func (p *plugin) timerLoop(ctx context.Context) error {
	clock := p.h.cfg.Clock
	var next []time.Time
	var cycleStart time.Time
	var cycle uint64
	// The interval's passes make one SweepEvent, reported when the next
	// interval starts (or the loop ends): observers count whole sweeps,
	// as PluginStatus.Cycles does, not passes.
	var sweep SweepEvent
	inSweep := false
	flush := func() {
		if inSweep {
			p.h.observeSweep(sweep)
			inSweep = false
		}
	}
	defer flush()
	for {
		if until := p.quarantinedUntil(); !until.IsZero() {
			if !p.h.wait(ctx, until.Sub(clock.Now())) {
				return nil
			}
		}
		spec := p.spec()
		if len(next) != spec.Partitions {
			next = make([]time.Time, spec.Partitions)
		}
		now := clock.Now()
		if cycleStart.IsZero() || now.Sub(cycleStart) >= spec.Interval {
			flush()
			cycleStart = now
			p.mu.Lock()
			p.cycles++
			cycle = p.cycles
			p.mu.Unlock()
			p.tracker.AdvanceCycle()
			sweep = SweepEvent{Plugin: p.name, Version: p.mod.Load().Manifest().Version, Host: p.h.HostID(), Cycle: cycle, Start: now}
			inSweep = true
		}
		woken := p.wake.take(spec.Partitions)
		var sum abi.ScanResult
		start := clock.Now()
		scanned := 0
		var due []int
		for i := range next {
			if !woken[i].IsZero() || !now.Before(next[i]) {
				due = append(due, i)
			}
		}
		var stages *passStages
		if so := p.h.stageObserver(); so != nil && len(due) > 0 {
			stages = newPassStages(clock)
			for _, i := range due {
				tag := model.Partition{Family: spec.Family, Index: uint16(i)}.Tag()
				if w := woken[i]; !w.IsZero() && (next[i].IsZero() || w.Before(next[i])) {
					stages.take(p.name, i, tag, true, w, now)
				} else {
					stages.take(p.name, i, tag, false, next[i], now)
				}
			}
			p.pass.Store(stages)
		}
		outs := p.scanPartitions(ctx, cycle, due)
		if stages != nil {
			p.pass.Store(nil)
			stages.report(p.h.stageObserver())
		}
		if ctx.Err() != nil {
			return nil
		}
		for j, o := range outs {
			i := due[j]
			if o.fault {
				scanned++
				break // the partitions after it were not reached: left as they were
			}
			if !o.ran { // not this host's: look again next interval (a gain wakes it)
				next[i] = now.Add(spec.Interval)
				continue
			}
			scanned++
			sum.Add(o.res)
			next[i] = p.nextScan(spec, o.res)
		}
		if scanned > 0 {
			sweep.Version = p.mod.Load().Manifest().Version
			sweep.Duration += clock.Now().Sub(start)
			sweep.Result.Add(sum)
		}
		if sum.Acted > 0 || sum.Errors > 0 {
			p.h.cfg.Logger.Info("scan cycle complete", "plugin", p.name, "cycle", cycle, "acted", sum.Acted, "errors", sum.Errors, "skipped", sum.Skipped, "elapsed_ms", clock.Now().Sub(start).Milliseconds())
		}
		p.h.statusChanged(false)
		earliest := cycleStart.Add(spec.Interval * time.Duration(p.h.cfg.Timers.SafetyFactor))
		for _, t := range next {
			if t.Before(earliest) {
				earliest = t
			}
		}
		if d := earliest.Sub(clock.Now()); d > 0 {
			due, stop := p.h.after(d)
			select {
			case <-ctx.Done():
				stop()
				return nil
			case <-due:
			case <-p.wake.ch:
				stop()
			case <-p.kick:
				stop()
			}
		}
	}
}

// nextScan is when a partition that returned res should be scanned next:
// at once when its batch was full, at its next due time when it reported
// one, else after the safety interval (the plain interval while wake-ups
// are not flowing).
func (p *plugin) nextScan(spec LoopSpec, res abi.ScanResult) time.Time {
	now := p.h.cfg.Clock.Now()
	if spec.BatchSize > 0 && res.Scanned >= spec.BatchSize && res.Acted > 0 {
		return now
	}
	safety := spec.Interval
	if p.h.wakeUp.Load() {
		safety *= time.Duration(p.h.cfg.Timers.SafetyFactor)
	}
	t := now.Add(safety)
	if res.NextDueMs > 0 {
		if due, ok := p.wake.dueAt(res.NextDueMs); ok {
			due = due.Add(time.Millisecond) // a hair past: the score must be <= server now
			if due.Before(t) {
				t = due
			}
		}
	}
	return t
}

// wakeListener subscribes to zadd keyevents of the backend's database and
// wakes the partitions of plugins whose wake patterns match the key. It
// reconnects after timerRetryDelay until ctx ends; on a cluster it
// subscribes on every primary and starts over at once when the primaries
// change (a restarted node gets its notify flags back then).
func (h *Host) wakeListener(ctx context.Context) {
	for ctx.Err() == nil {
		err := h.listenOnce(ctx)
		h.wakeUp.Store(false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, valkey.ErrPrimariesChanged) {
			h.cfg.Logger.Info("due-timer wake subscription: cluster primaries changed; resubscribing", "error", err)
			continue
		}
		h.cfg.Logger.Warn("due-timer wake subscription failed; polling at plugin intervals until it is back", "error", err, "retry_in_ms", timerRetryDelay.Milliseconds())
		if !sleep(ctx, timerRetryDelay) {
			return
		}
	}
}

func (h *Host) listenOnce(ctx context.Context) error {
	if !h.cfg.Timers.NoConfigSet {
		if err := h.cfg.Backend.EnableZaddKeyevents(ctx); err != nil {
			return err
		}
	}
	return h.cfg.Backend.WatchZaddKeyevents(ctx, h.routeWake, func() {
		h.wakeUp.Store(true)
		h.wakeAll() // notifications may have been missed while down
	})
}

// routeWake wakes the partition named by key's hash tag in every plugin
// whose wake patterns match key.
func (h *Host) routeWake(key string) {
	tag := abi.HashTag(key) // "{fp:7}"
	_, num, ok := strings.Cut(strings.Trim(tag, "{}"), ":")
	if !ok {
		return
	}
	i, err := strconv.Atoi(num)
	if err != nil {
		return
	}
	at := h.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.plugins {
		if p.wake != nil && p.wake.matches(key) {
			p.wake.wake(i, at)
		}
	}
}

func (h *Host) wakeAll() {
	at := h.cfg.Clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.plugins {
		if p.wake != nil {
			p.wake.wake(-1, at)
		}
	}
}

// timersOn reports whether this host runs due-time timers: on unless
// disabled, and only with a Valkey backend to subscribe to.
func (h *Host) timersOn() bool { return !h.cfg.Timers.Disabled && h.cfg.Backend != nil }

// pluginConfig is the host's per-plugin config: the deployment's budget
// and quota partition counts (pdk.ConfigBudgetPartitions and
// pdk.ConfigQuotaPartitions, so a plugin locating budgets or quotas from
// another family routes like the host; an operator entry wins), plus the
// key telling due-index scanners to report their next due time when
// timers run.
func (h *Host) pluginConfig(name string) PluginConfig {
	pc := h.cfg.Plugins[name]
	cfg := make(map[string]string, len(pc.Config)+3)
	cfg[pdk.ConfigBudgetPartitions] = strconv.Itoa(int(h.cfg.Partitions.Budget))
	cfg[pdk.ConfigQuotaPartitions] = strconv.Itoa(int(h.cfg.Partitions.Quota))
	for k, v := range pc.Config {
		cfg[k] = v
	}
	if h.timersOn() {
		cfg[pdk.ConfigNextDue] = "1"
	}
	pc.Config = cfg
	return pc
}
