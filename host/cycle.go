package host

import (
	"context"
	"time"

	"github.com/fabric-host/fabric/abi"
)

// The body both scan loops share (loop's fixed sweep and timerLoop's due
// schedule): waiting out a quarantine, starting a cycle, and booking what
// a cycle (or a pass of one) came to.

// waitQuarantine waits out a quarantine, or until a new version is
// swapped in; false when ctx ended.
func (p *plugin) waitQuarantine(ctx context.Context) bool {
	for {
		until := p.quarantinedUntil()
		if until.IsZero() {
			return ctx.Err() == nil
		}
		d := until.Sub(p.h.cfg.Clock.Now())
		if d <= 0 {
			return ctx.Err() == nil
		}
		ch, stop := p.h.after(d)
		select {
		case <-ctx.Done():
			stop()
			return false
		case <-ch:
			return true
		case <-p.kick:
			stop() // a new version: look again (its record is clean)
		}
	}
}

// beginCycle starts sweep cycle number n of the plugin at start: the
// per-sweep budget restarts, the failure tracker advances, and the
// returned SweepEvent is the cycle's, to fill in and observe.
func (p *plugin) beginCycle(start time.Time) SweepEvent {
	p.budget.NewSweep()
	p.mu.Lock()
	p.cycles++
	cycle := p.cycles
	p.mu.Unlock()
	p.tracker.AdvanceCycle()
	return SweepEvent{Plugin: p.name, Version: p.mod.Load().Manifest().Version, Host: p.h.HostID(), Cycle: cycle, Start: start}
}

// cycleSettled books scans of cycle that came to sum in elapsed: logged
// when they acted or erred, and the status file told.
func (p *plugin) cycleSettled(cycle uint64, sum abi.ScanResult, elapsed time.Duration) {
	if sum.Acted > 0 || sum.Errors > 0 {
		p.h.cfg.Logger.Info("scan cycle complete", "plugin", p.name, "cycle", cycle, "acted", sum.Acted, "errors", sum.Errors, "skipped", sum.Skipped, "elapsed_ms", elapsed.Milliseconds())
	}
	p.h.statusChanged(false)
}
