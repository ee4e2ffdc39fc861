package host

import (
	"context"
	"strings"
	"time"

	"github.com/fabric-host/fabric/abi"
)

// Idle release: a plugin called every few seconds or less often need not
// hold a warm instance and resident machine code between its calls. An
// instance idle in its pool for the plugin's idle-release time is closed
// (its linear memory unmapped at once), and once the plugin version holds
// no instance and has no call in flight, the resident pages of its machine
// code are dropped (MADV_DONTNEED on the clean file mapping: they stay in
// the page cache and come back at a minor fault). The next call makes and
// initialises a fresh instance on its own path: about 3 ms of CPU for a
// stock Go scanner, 5 ms with its code faulted back in
// (BenchmarkColdCall), against ~9 MiB resident per idle plugin.
//
// Dispatchers (completions) and scanners driven by due-time timers are on
// the hot paths whose lateness the host bounds, so they are pinned warm
// unless their PluginConfig.IdleRelease says otherwise.

// idleAfter is how long an idle instance of p's version m is kept before
// it is released; 0 pins it warm.
func (h *Host) idleAfter(p *plugin, m *Module) time.Duration {
	if d := h.cfg.Plugins[p.name].IdleRelease; d != 0 {
		return max(d, 0)
	}
	if h.cfg.IdleRelease <= 0 || hotPath(p, m) {
		return 0
	}
	return h.cfg.IdleRelease
}

// hotPath reports whether p is on a path whose lateness the host bounds:
// a dispatcher (called at completions) or a due-time scanner (its manifest
// names wake indexes, abi.ConfigWake; with timers off it polls at its
// short interval), unless disabled (never called).
func hotPath(p *plugin, m *Module) bool {
	p.mu.Lock()
	disabled := p.state == StateDisabled
	p.mu.Unlock()
	man := m.Manifest()
	return !disabled && (man.Kind == abi.KindDispatcher || strings.TrimSpace(man.Config[abi.ConfigWake]) != "")
}

// codeTrimInterval is how often the resident machine code of plugins
// pinned warm is dropped to what their calls execute: the pages of paths
// taken rarely (the guest's garbage collector, an error path) stay
// resident once executed; the next call faults back its working set from
// the page cache (about 2 ms of CPU for a stock scanner).
const codeTrimInterval = 10 * time.Second

// reapTick is how often the host looks for idle instances: a quarter of
// the idle-release time, between 50 ms and 1 s.
func (h *Host) reapTick() time.Duration {
	d := h.cfg.IdleRelease / 4
	for _, pc := range h.cfg.Plugins {
		if pc.IdleRelease > 0 {
			d = min(d, pc.IdleRelease/4)
		}
	}
	return min(max(d, 50*time.Millisecond), time.Second)
}

// reapIdle releases idle instances (releaseIdle) every reapTick until ctx
// ends.
func (h *Host) reapIdle(ctx context.Context) {
	t := time.NewTicker(h.reapTick())
	defer t.Stop()
	trimmed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		ps := make([]*plugin, 0, len(h.plugins))
		for _, p := range h.plugins {
			ps = append(ps, p)
		}
		h.mu.Unlock()
		now := time.Now()
		trim := now.Sub(trimmed) >= codeTrimInterval
		if trim {
			trimmed = now
		}
		for _, p := range ps {
			m := p.mod.Load()
			after := h.idleAfter(p, m)
			if after > 0 {
				m.releaseIdle(ctx, now, after, 0)
				continue
			}
			// Pinned warm: one instance stays; a dispatcher's second, and
			// any other extra, is released like an idle plugin's.
			m.releaseIdle(ctx, now, max(h.cfg.IdleRelease, time.Second), 1)
			if trim {
				trimCode(m.codeKey)
			}
		}
	}
}

// releaseIdle closes the pooled instances idle since before now-after,
// but the first warm of the pool, then, when the module holds no instance and runs no call, drops its
// machine code's resident pages (once until its next call). It returns the
// number of instances released.
func (m *Module) releaseIdle(ctx context.Context, now time.Time, after time.Duration, warm int) int {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0
	}
	var idle []*instance
	keep := m.pool[:0]
	for i, inst := range m.pool {
		if i >= warm && now.Sub(inst.idleSince) >= after {
			idle = append(idle, inst)
		} else {
			keep = append(keep, inst)
		}
	}
	clear(m.pool[len(keep):])
	m.pool = keep
	drop := len(m.pool) == 0 && m.inflight == 0 && m.busy == 0 && m.warming == 0 && !m.codeDropped
	if drop {
		m.codeDropped = true
	}
	m.mu.Unlock()
	for _, inst := range idle {
		m.discard(ctx, inst)
	}
	m.idleReleases.Add(int64(len(idle)))
	if drop {
		trimCode(m.codeKey)
	}
	return len(idle)
}

// instances returns how many instances the module holds: idle in its pool
// or in a call.
func (m *Module) instances() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0
	}
	return len(m.pool) + m.busy
}
