package host

import (
	"context"
	"runtime"
	"time"

	"github.com/fabric-host/fabric/host/hostfn"
)

// scheduler shares the machine among plugin calls. At most Config.MaxCalls
// calls run at once, the waiting ones served in arrival order (each
// plugin's loop makes one call at a time, so waiters are served round
// robin across plugins). A heavy plugin — its last call timed out — must
// also hold one of Config.HeavyCalls heavy slots: hung plugins share a
// core or two among themselves and can never hold every slot, so a
// healthy plugin's calls start on time. (A long call that returns is not
// heavy: a healthy plugin slowed by a loaded machine must not queue
// behind the hung ones.) A call's timeout starts once it holds its
// slots; the wait is not charged to it.
type scheduler struct {
	slots chan struct{}
	heavy chan struct{}
}

func newScheduler(calls, heavy int) *scheduler {
	return &scheduler{slots: make(chan struct{}, calls), heavy: make(chan struct{}, heavy)}
}

// defaultMaxCalls and defaultHeavyCalls size the scheduler for this
// machine: the calls of healthy plugins mostly wait on the backend, so
// several per core; heavy ones burn a core each, so at most half of them.
func defaultMaxCalls() int   { return max(16, 4*runtime.GOMAXPROCS(0)) }
func defaultHeavyCalls() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// slot waits for p's turn to call; false when ctx ended first. done must
// be called after the call with how long it ran and its error.
func (p *plugin) slot(ctx context.Context) (done func(ran time.Duration, err error), ok bool) {
	s := p.h.sched
	heavy := p.heavy.Load()
	if heavy {
		select {
		case s.heavy <- struct{}{}:
		case <-ctx.Done():
			return nil, false
		}
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		if heavy {
			<-s.heavy
		}
		return nil, false
	}
	return func(_ time.Duration, err error) {
		<-s.slots
		if heavy {
			<-s.heavy
		}
		p.heavy.Store(FaultKind(err) == FaultTimeout)
	}, true
}

// budgetOf is the host-function budget of limits (negative: not limited).
func budgetOf(l Limits) hostfn.Limits {
	pos := func(v int64) int64 { return max(v, 0) }
	return hostfn.Limits{CallsPerSweep: pos(l.HostCallsPerSweep), CallsPerSecond: pos(l.HostCallsPerSecond),
		CommandsPerSweep: pos(l.CommandsPerSweep), CommandsPerSecond: pos(l.CommandsPerSecond)}
}
