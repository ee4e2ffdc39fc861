package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
)

// A plugin call's timeout is a budget of its own CPU time, not of wall
// time: on a starved machine (load 20–28 on 2 cores) a call that needs a
// tenth of its timeout of CPU waits for a core long enough to pass it,
// and a wall-clock deadline faulted and quarantined stock plugins for the
// host's own starvation. The call is cut, as a timeout fault, when
//
//   - its CPU time reaches its timeout (the probation cut on probation,
//     see turn.cut): the thread CPU clock of the OS thread running it,
//     read by the interrupt checks (checkInterrupt); or
//   - its wall time reaches wallCapFactor × its timeout, whatever its CPU
//     (a plugin that blocks, or a host so starved that the call cannot
//     finish: it is still cut); or
//   - the deadline of the partition leases it runs under passes (see
//     callContext): a call past it could race another host's.
//
// The CPU time is the call's thread's: its guest code and the host
// functions it calls, which run on the same thread (their decoding and
// copying are work the plugin asked for). Time the call spends waiting
// inside a host function — on the backend, a lock, the Go scheduler — is
// not CPU: the thread sleeps. A backend that hangs is bounded by the wall
// cap, the leases' deadline and the backend client's own timeouts.
//
// Reading the thread CPU clock is a system call (≈ 0.8 µs on a VM, a
// fifth of an empty plugin call) and binds the call to its thread
// (runtime.LockOSThread), so a call pays neither until its wall time
// reaches 1/cpuArmShare of its budget: then the check locks the thread and
// reads the clock once (it arms), charging the call budget/cpuArmShare
// for the stretch before. That bounds what it ran before: its previous
// check was under that wall time, and since it the guest ran at most
// interruptEvery headers. After arming, the clock is read only once the
// wall time since could have spent the rest of the budget (a thread's CPU
// time never passes its wall time). A call that returns within
// 1/cpuArmShare of its timeout — nearly all — pays one time.Now per check.
//
// This leniency is for a plugin whose current version returned before
// (fairState.proven), as the probation cut is: a plugin that never
// returned has no record of being healthy, so its call is cut at its
// timeout of wall time as before, and a cut at its leases' deadline is a
// fault whatever its CPU. A hostile plugin thus cannot make its first
// calls burn a core for its whole timeout of CPU on a starved machine,
// where that would take many times the timeout of wall time.
//
// Outside Linux (no thread CPU clock here) the budget is of wall time, as
// before: the checks count the wall time as CPU.
const (
	// wallCapFactor × the timeout is the wall time after which a call is
	// cut whatever its CPU time.
	wallCapFactor = 8
	// cpuArmShare: the CPU clock is first read at 1/cpuArmShare of the
	// budget of wall time.
	cpuArmShare = 16
)

// cpuBudget is one plugin call's CPU-time budget. The call's context
// carries it (callContext); the interrupt checks spend it (spent), on the
// call's goroutine only, and Module.call releases its thread (release).
// A budget spent does not cancel the context: the check that finds it
// spent traps the call, and the call's failure reads the cause
// (cutCause).
type cpuBudget struct {
	budget  time.Duration
	lenient bool          // a proven plugin's: the wall cap and the starved lease cut apply
	armAt   time.Duration // budget/cpuArmShare, or sooner for a nearer lease deadline
	start   time.Time
	what    string
	cut     error // the cpuCut, once spent

	armed  bool          // the thread is locked and cpu0 read
	wall0  time.Duration // wall time at the arm
	cpu0   time.Duration // thread CPU time at the arm
	locked bool          // LockOSThread is to be undone
}

type cpuBudgetKey struct{}

// callContext bounds one plugin call of timeout (see cpuBudget): a CPU
// budget of timeout, a wall cap of wallCapFactor × timeout (timeout when
// the plugin is not proven: it never returned), and the deadline of the
// leases it runs under (zero: none); what names the call in the cause.
func (h *Host) callContext(ctx context.Context, timeout time.Duration, leaseDeadline time.Time, what string, proven bool) (context.Context, context.CancelFunc) {
	wall, horizon := timeout, timeout
	if proven {
		wall = wallCapFactor * timeout
	}
	var cause error = &wallCut{what: what, timeout: timeout, wall: wall, cap: proven}
	if !leaseDeadline.IsZero() {
		if d := leaseDeadline.Sub(h.cfg.Clock.Now()); d < wall {
			wall, cause = d, &wallCut{what: what, timeout: timeout, wall: d, lease: true}
			horizon = min(horizon, d)
		}
	}
	wctx, cancel := context.WithTimeoutCause(ctx, wall, cause)
	b := &cpuBudget{budget: timeout, lenient: proven, armAt: max(horizon, 0) / cpuArmShare, start: time.Now(), what: what}
	return context.WithValue(wctx, cpuBudgetKey{}, b), cancel
}

// budgetOfCall is the CPU budget ctx carries, nil for none.
func budgetOfCall(ctx context.Context) *cpuBudget {
	b, _ := ctx.Value(cpuBudgetKey{}).(*cpuBudget)
	return b
}

// withoutCPUBudget is ctx without its call's CPU budget, for work off the
// call's goroutine (an instance warmed for the next call): the budget's
// clock is its thread's.
func withoutCPUBudget(ctx context.Context) context.Context {
	return context.WithValue(ctx, cpuBudgetKey{}, (*cpuBudget)(nil))
}

// spent reports whether the call used its budget of CPU time, and then
// keeps the cause (cutCause); the check traps the call. Called by the
// interrupt checks on the call's goroutine.
func (b *cpuBudget) spent() bool {
	if b == nil {
		return false
	}
	wall := time.Since(b.start)
	charged := b.armAt
	if !b.armed {
		if wall < charged {
			return false
		}
		b.arm(wall)
	}
	if charged+wall-b.wall0 < b.budget {
		return false
	}
	cpu, ok := threadCPU()
	if !ok {
		cpu = wall // no thread clock: the wall time stands for it
	}
	used := charged + cpu - b.cpu0
	if used < b.budget {
		return false
	}
	b.cut = &cpuCut{what: b.what, budget: b.budget, wall: wall}
	return true
}

// cutCause is why spent trapped the call, nil when it did not.
func (b *cpuBudget) cutCause() error {
	if b == nil {
		return nil
	}
	return b.cut
}

// arm locks the call to its thread and reads the thread's CPU clock.
func (b *cpuBudget) arm(wall time.Duration) {
	runtime.LockOSThread()
	b.locked = true
	b.armed, b.wall0 = true, wall
	if cpu, ok := threadCPU(); ok {
		b.cpu0 = cpu
	} else {
		b.cpu0 = wall
	}
}

// offCPU reports whether the call, cut at its leases' deadline, spent
// most of its wall time off its CPU — waiting for a core, or on the
// backend inside a host function — with the CPU time it used (an upper
// bound). A call that was not armed by then passed no check since
// armAt, a sixteenth of the way: it was off its CPU. Without a thread
// clock, or for a plugin not proven, false. On the call's goroutine.
func (b *cpuBudget) offCPU() (used time.Duration, off bool) {
	if b == nil || !b.lenient {
		return 0, false
	}
	wall := time.Since(b.start)
	if !b.armed {
		return b.armAt, true
	}
	cpu, ok := threadCPU()
	if !ok {
		return wall, false
	}
	used = b.armAt + cpu - b.cpu0
	return used, used < wall/2
}

// release undoes arm's lock once the call is over; on the call's
// goroutine.
func (b *cpuBudget) release() {
	if b != nil && b.locked {
		b.locked = false
		runtime.UnlockOSThread()
	}
}

// cpuCut is the cause of a call cut for its CPU time: a timeout.
type cpuCut struct {
	what         string
	budget, wall time.Duration
}

func (c *cpuCut) Error() string {
	return fmt.Sprintf("%s: %s after %s of CPU time (in %s of wall time)", ErrTimeout, c.what, c.budget, c.wall.Round(time.Millisecond))
}

func (c *cpuCut) Unwrap() error { return ErrTimeout }

// errStarved is matched by a call cut at its leases' deadline after
// spending most of its wall time off its CPU (cpuBudget.offCPU): the
// call is cut — its partitions may be another host's by now — but it is
// the host's starvation (or the backend's slowness), not the plugin's
// fault: the plugin is not quarantined, and the call's records carry the
// error.
var errStarved = errors.New("host: plugin call starved")

// starvedCut is the error of such a call; it matches ErrLeaseEnded, not
// ErrTimeout.
type starvedCut struct {
	what      string
	wall, cpu time.Duration
}

func (c *starvedCut) Error() string {
	return fmt.Sprintf("%s: %s: %s after %s, at most %s of it on CPU (not a fault)", errStarved, ErrLeaseEnded, c.what, c.wall.Round(time.Millisecond), c.cpu.Round(time.Millisecond))
}

func (c *starvedCut) Unwrap() []error { return []error{errStarved, ErrLeaseEnded} }

// leaseCut is the error of a call whose context ended with cause, on
// its goroutine: a starvedCut when the leases' deadline cut a call that
// was mostly off its CPU, else the cause.
func leaseCut(ctx context.Context, cause error) error {
	var wc *wallCut
	if !errors.As(cause, &wc) || !wc.lease {
		return cause
	}
	if used, off := budgetOfCall(ctx).offCPU(); off {
		return &starvedCut{what: wc.what, wall: wc.wall, cpu: used}
	}
	return cause
}

// isFault reports whether a call's error faults its plugin: any but a
// starved call's.
func isFault(err error) bool { return err != nil && !errors.Is(err, errStarved) }

// wallCut is the cause of a call cut by the wall clock: its wall cap, or
// its leases' deadline (lease: it matches ErrLeaseEnded too).
type wallCut struct {
	what          string
	timeout, wall time.Duration
	lease         bool
	cap           bool // the wall cap of a proven plugin, not its timeout
}

func (c *wallCut) Error() string {
	if c.lease {
		return fmt.Sprintf("%s: %s: %s after %s", ErrTimeout, ErrLeaseEnded, c.what, c.wall.Round(time.Millisecond))
	}
	if !c.cap {
		return fmt.Sprintf("%s: %s after %s", ErrTimeout, c.what, c.wall)
	}
	return fmt.Sprintf("%s: %s after %s of CPU time or %s of wall time (%d×): the wall time passed first", ErrTimeout, c.what, c.timeout, c.wall, wallCapFactor)
}

func (c *wallCut) Unwrap() []error {
	if c.lease {
		return []error{ErrTimeout, ErrLeaseEnded}
	}
	return []error{ErrTimeout}
}
