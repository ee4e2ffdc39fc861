package host

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// scheduler shares the machine among plugin calls fairly: healthy plugins
// first, plugins on probation behind them.
//
// A plugin is on probation from a fault (trap, plugin error, timeout,
// over memory, over output, over budget, bad output) until its next call
// that succeeds: its quarantine count is not zero. Its calls run in their
// own class:
//
//   - Healthy calls run up to Config.MaxCalls at once, served in arrival
//     order (each plugin's loop makes one call at a time, so waiters are
//     served round robin across plugins). A probation call never holds one
//     of their slots, so a healthy call never waits behind one; nor behind
//     a new plugin's first call that hangs: a healthy call still running
//     after Config.ProbationTimeout gives its slot back and counts as a
//     probation call until it returns.
//   - Probation calls run up to Config.ProbationCalls at once (default
//     half the cores, at least 1), and only while no healthy call is
//     waiting for its turn; those of plugins whose version returned
//     before wait ahead of those that never did. Hung and hostile plugins
//     thus share a core or so among themselves whatever their number, and
//     healthy plugins keep the rest.
//   - A probation call after a timeout of a plugin that never returned is
//     cut sooner (probationTimeout): at Config.ProbationTimeout, doubled
//     every second consecutive fault and never above its grant. A plugin
//     that loops until its 30 s timeout burns a core for 1 s after its
//     first fault, not 30 s. (A plugin that returned before, or whose call
//     ended by itself — a trap, over memory, over budget — keeps its
//     timeout: a loaded machine's timeout is not made worse, and a fault
//     is told by the same label.)
//
// A call's timeout starts once it holds its turn: the wait is charged
// neither to its timeout nor to its partition leases. How long a call
// waited is its CycleRecord's Wait; whether it ran on probation, its
// Probation.
type scheduler struct {
	mu             sync.Mutex
	healthyCap     int
	probationCap   int
	healthyRunning int
	probRunning    int
	healthyQ       []*waiter
	probQ          []*waiter
	// demoteAfter: a healthy call still running after this long gives its
	// healthy slot back and counts as a probation call until it returns.
	demoteAfter time.Duration
}

// waiter is one call waiting for its turn.
type waiter struct {
	probation bool
	proven    bool          // on probation, but its version returned before
	ready     chan struct{} // closed when admitted
	hold      *hold         // set when admitted, under scheduler.mu
}

// hold is one admitted call's slot.
type hold struct {
	// probation: counted among the probation calls (admitted so, or
	// demoted); released: given back. Both under scheduler.mu.
	probation, released bool
	timer               *time.Timer
}

func newScheduler(calls, probation int, demoteAfter time.Duration) *scheduler {
	return &scheduler{healthyCap: calls, probationCap: probation, demoteAfter: demoteAfter}
}

// defaultMaxCalls and defaultProbationCalls size the scheduler for this
// machine: the calls of healthy plugins mostly wait on the backend, so
// several per core; those of plugins on probation may burn a core each, so
// at most half of them.
func defaultMaxCalls() int       { return max(16, 4*runtime.GOMAXPROCS(0)) }
func defaultProbationCalls() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// acquire waits for a turn of the class; nil when ctx ended first.
func (s *scheduler) acquire(ctx context.Context, probation, proven bool) *hold {
	s.mu.Lock()
	if s.freeLocked(probation) && len(s.healthyQ) == 0 && (!probation || len(s.probQ) == 0) {
		h := s.admitLocked(probation)
		s.mu.Unlock()
		return h
	}
	w := &waiter{probation: probation, proven: proven, ready: make(chan struct{})}
	if probation {
		// A plugin that has returned before waits ahead of those that
		// never did (after the other proven ones).
		i := len(s.probQ)
		if proven {
			i = 0
			for i < len(s.probQ) && s.probQ[i].proven {
				i++
			}
		}
		s.probQ = slices.Insert(s.probQ, i, w)
	} else {
		s.healthyQ = append(s.healthyQ, w)
	}
	s.mu.Unlock()
	select {
	case <-w.ready:
		return w.hold
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.hold != nil { // admitted as ctx ended: give the turn back
		s.releaseLocked(w.hold)
		return nil
	}
	q := &s.healthyQ
	if probation {
		q = &s.probQ
	}
	for i, o := range *q {
		if o == w {
			*q = append((*q)[:i], (*q)[i+1:]...)
			break
		}
	}
	return nil
}

// release ends a turn and hands the slot on.
func (s *scheduler) release(h *hold) {
	s.mu.Lock()
	s.releaseLocked(h)
	s.mu.Unlock()
}

func (s *scheduler) freeLocked(probation bool) bool {
	if probation {
		return s.probRunning < s.probationCap
	}
	return s.healthyRunning < s.healthyCap
}

func (s *scheduler) admitLocked(probation bool) *hold {
	h := &hold{probation: probation}
	if probation {
		s.probRunning++
		return h
	}
	s.healthyRunning++
	if s.demoteAfter > 0 {
		h.timer = time.AfterFunc(s.demoteAfter, func() { s.demote(h) })
	}
	return h
}

// demote moves a healthy call that has run demoteAfter into the probation
// count: its healthy slot goes to the next healthy call, and no probation
// call starts beside it beyond ProbationCalls. (It keeps its core: a
// running call cannot be moved off it.)
func (s *scheduler) demote(h *hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.released || h.probation {
		return
	}
	h.probation = true
	s.healthyRunning--
	s.probRunning++
	s.dispatchLocked()
}

// releaseLocked frees h's slot, then admits waiters.
func (s *scheduler) releaseLocked(h *hold) {
	if h.released {
		return
	}
	h.released = true
	if h.timer != nil {
		h.timer.Stop()
	}
	if h.probation {
		s.probRunning--
	} else {
		s.healthyRunning--
	}
	s.dispatchLocked()
}

// dispatchLocked admits waiters: healthy ones first, probation ones only
// once no healthy call waits.
func (s *scheduler) dispatchLocked() {
	for len(s.healthyQ) > 0 && s.freeLocked(false) {
		w := s.healthyQ[0]
		s.healthyQ = s.healthyQ[1:]
		w.hold = s.admitLocked(false)
		close(w.ready)
	}
	for len(s.healthyQ) == 0 && len(s.probQ) > 0 && s.freeLocked(true) {
		w := s.probQ[0]
		s.probQ = s.probQ[1:]
		w.hold = s.admitLocked(true)
		close(w.ready)
	}
}

// turn is one call's hold on the scheduler.
type turn struct {
	// wait is how long the call waited for its turn.
	wait time.Duration
	// probation: the plugin was on probation (see scheduler).
	probation bool
	p         *plugin
	hold      *hold
}

// onProbation reports whether the plugin's last call faulted (its
// quarantine count is not zero; a success or a new version resets it),
// how many consecutive faults it has, and whether the last was a timeout.
func (p *plugin) onProbation() (probation bool, n int, timedOut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quarantines > 0, p.quarantines, p.fault == FaultTimeout
}

// slot waits for p's turn to call; false when ctx ended first. t.done
// must be called after the call with how long it ran and its error.
func (p *plugin) slot(ctx context.Context) (t turn, ok bool) {
	probation, _, _ := p.onProbation()
	start := time.Now()
	h := p.h.sched.acquire(ctx, probation, p.fair.proven())
	if h == nil {
		return t, false
	}
	return turn{wait: time.Since(start), probation: probation, p: p, hold: h}, true
}

// done ends the turn of a call that ran for ran and returned err.
func (t turn) done(ran time.Duration, err error) {
	if t.p == nil {
		return
	}
	t.p.h.sched.release(t.hold)
	if err == nil {
		t.p.fair.sawSuccess(ran)
	}
}

// cut is the timeout of the turn's call: timeout, or on probation after
// a timeout the probation timeout; why tells the cut for the fault's
// reason.
func (t turn) cut(timeout time.Duration) (d time.Duration, why string) {
	if !t.probation || t.p == nil {
		return timeout, ""
	}
	_, n, timedOut := t.p.onProbation()
	if !timedOut {
		return timeout, ""
	}
	d = t.p.fair.probationTimeout(t.p.h.cfg.ProbationTimeout, timeout, n)
	if d >= timeout {
		return timeout, ""
	}
	return d, fmt.Sprintf(" (on probation after %d consecutive faults: cut at %s of its %s)", n, d, timeout)
}

// fairState is what the scheduler keeps of one plugin.
type fairState struct {
	// slowestOK is the longest successful call of the plugin's current
	// version, in ns.
	slowestOK atomic.Int64
}

func (f *fairState) sawSuccess(ran time.Duration) {
	ran = max(ran, 1)
	for {
		old := f.slowestOK.Load()
		if int64(ran) <= old || f.slowestOK.CompareAndSwap(old, int64(ran)) {
			return
		}
	}
}

// reset forgets the record (a new version).
func (f *fairState) reset() { f.slowestOK.Store(0) }

// proven reports whether the plugin's current version ever returned.
func (f *fairState) proven() bool { return f.slowestOK.Load() > 0 }

// probationTimeout is the cut of a call after n consecutive faults of a
// plugin that never returned: base, doubled every second fault
// (restarting with the quarantine backoff), never above grant. A plugin
// that did return keeps its grant: its timeout was more likely a loaded
// machine's than a hang.
func (f *fairState) probationTimeout(base, grant time.Duration, n int) time.Duration {
	if f.proven() {
		return grant
	}
	d := base
	if n > 0 {
		d <<= ((n - 1) % quarantineSteps) / 2
	}
	return min(d, grant)
}
