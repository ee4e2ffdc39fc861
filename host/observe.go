package host

import (
	"time"

	"github.com/fabric-host/fabric/abi"
)

// SweepEvent is one finished sweep of a scanner plugin over its
// partitions, as an Observer sees it: one per PluginStatus.Cycles. A
// plugin on due-time timers scans its due or woken partitions in several
// passes per interval; the passes of one interval are one event, reported
// when the next interval starts, its Duration their sum (the time spent
// calling the plugin, 0 when nothing was due) and its Result their total.
type SweepEvent struct {
	// Plugin and Version name what served the sweep's last call.
	Plugin, Version string
	// Host is the id of the host that swept ("" with partition leases
	// off); it called only the partitions it held.
	Host string
	// Cycle is the sweep number (PluginStatus.Cycles at its start).
	Cycle uint64
	// Start is when the sweep began; Duration how long it took (on
	// timers: its passes together), by the host's Clock.
	Start    time.Time
	Duration time.Duration
	// Result sums the sweep's partition calls.
	Result abi.ScanResult
}

// Observer receives host events for metrics (see internal/admin). Counters
// that PluginStatus already carries (calls, faults, denied host calls,
// swaps) are read from Plugins at scrape time; an Observer only gets what
// a snapshot cannot show, such as the duration of each sweep.
//
// # Notes
//
//   - Called on the plugin's loop goroutine: implementations must be fast
//     and safe for concurrent use.
type Observer interface {
	SweepDone(SweepEvent)
}

func (h *Host) observeSweep(ev SweepEvent) {
	if h.cfg.Observer != nil {
		h.cfg.Observer.SweepDone(ev)
	}
}
