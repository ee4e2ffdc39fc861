package host

import (
	"sync/atomic"
	"time"
)

// preciseMargin is the last stretch of a due-time wait that the OS sleeps
// (sleepPrecise) rather than the Go runtime's timers: an idle Go process
// waits for its next timer in epoll_wait, whose timeout is whole
// milliseconds, so a runtime timer fires up to a millisecond late — on
// average half of one added to every due item's lateness.
const preciseMargin = 2 * time.Millisecond

// afterPrecise is after for due-time timers: on the real clock the wait
// ends within the OS's timer slack of d rather than up to a millisecond
// late (preciseAfter); a WaitClock's waits are its own.
func (h *Host) afterPrecise(d time.Duration) (<-chan time.Time, func()) {
	if _, ok := h.cfg.Clock.(WaitClock); ok {
		return h.after(d)
	}
	return preciseAfter(d)
}

// preciseAfter returns a channel that receives once d has passed, and a
// func releasing it early: a runtime timer runs until preciseMargin
// before, then a goroutine sleeps the rest in the OS (holding a thread
// for at most about preciseMargin, also when released meanwhile: the
// receive is then dropped).
func preciseAfter(d time.Duration) (<-chan time.Time, func()) {
	ch := make(chan time.Time, 1)
	deadline := time.Now().Add(d)
	var stopped atomic.Bool
	fire := func() {
		if rest := time.Until(deadline); rest > 0 {
			sleepPrecise(rest)
		}
		if !stopped.Load() {
			ch <- time.Now()
		}
	}
	if d <= preciseMargin {
		go fire()
		return ch, func() { stopped.Store(true) }
	}
	t := time.AfterFunc(d-preciseMargin, fire)
	return ch, func() {
		stopped.Store(true)
		t.Stop()
	}
}
