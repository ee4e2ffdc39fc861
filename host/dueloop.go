package host

import (
	"context"
	"slices"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

// dueSchedule is a timer loop's schedule: when each partition is next
// due, and why.
type dueSchedule struct {
	// next is when partition i is next to be scanned (zero: at once).
	next []time.Time
	// safety: next[i] is a safety poll (nothing known due), not a due
	// time the plugin reported, a wake-up or a full batch.
	safety []bool
	// woken: next[i] comes from a wake-up (for the stage timings).
	woken []bool
	// busy: a call scanning partition i is in flight.
	busy []bool
	// again: partition i was woken while busy, at again[i]; it is due
	// again once its call is done (the call may have read its index
	// before the write that woke it).
	again []time.Time
}

func (s *dueSchedule) resize(n int) {
	if len(s.next) == n {
		return
	}
	*s = dueSchedule{next: make([]time.Time, n), safety: make([]bool, n), woken: make([]bool, n),
		busy: make([]bool, n), again: make([]time.Time, n)}
}

// wake makes partition i due at at (when it arrived).
func (s *dueSchedule) wake(i int, at time.Time) {
	if s.busy[i] {
		if s.again[i].IsZero() {
			s.again[i] = at
		}
		return
	}
	if s.safety[i] || at.Before(s.next[i]) {
		s.next[i], s.safety[i], s.woken[i] = at, false, true
	}
}

// later learns from a wake-up at at that partition i has nothing due
// before t (zero: nothing at all): its timer moves up to t. A partition
// in flight is scanned again instead (its call may have read the index
// before the write).
func (s *dueSchedule) later(i int, t, at time.Time) {
	if s.busy[i] {
		s.wake(i, at)
		return
	}
	if !t.IsZero() && (s.safety[i] || t.Before(s.next[i])) {
		s.next[i], s.safety[i], s.woken[i] = t, false, false
	}
}

// due returns the partitions due by now and not in flight: those due
// for known work in due order, then those due for a safety poll.
func (s *dueSchedule) due(now time.Time) (work, safety []int) {
	for i, t := range s.next {
		if s.busy[i] || now.Before(t) {
			continue
		}
		if s.safety[i] {
			safety = append(safety, i)
		} else {
			work = append(work, i)
		}
	}
	slices.SortStableFunc(work, func(a, b int) int { return s.next[a].Compare(s.next[b]) })
	return work, safety
}

// earliest is the soonest next time of a partition not in flight (only
// of those due for known work unless withSafety), or limit.
func (s *dueSchedule) earliest(limit time.Time, withSafety bool) time.Time {
	for i, t := range s.next {
		if !s.busy[i] && (withSafety || !s.safety[i]) && t.Before(limit) {
			limit = t
		}
	}
	return limit
}

// chunkDone is one finished call (or calls) of a timer loop over idxs.
type chunkDone struct {
	idxs       []int
	outs       []partOutcome
	start, end time.Time
	// tags are the partitions' hash tags; safety: a safety poll.
	tags   []string
	safety bool
}

// timerLoop drives a plugin with wake patterns: one scan loop over a
// schedule of partitions keyed by when each is next due — the due time
// the plugin reported, a wake-up, or the safety poll. Due partitions are
// handed out in due order to up to TimerConfig.Calls calls in flight at
// once (no more than the plugin's warm instances) (a burst is split among them, each call scanning its partitions in
// one fabric_scan_batch where exported), before any safety poll; with
// wake-ups flowing, at most one call polls for safety at a time. A full
// interval still counts as one failure-tracker cycle.
func (p *plugin) timerLoop(ctx context.Context) error {
	clock := p.h.cfg.Clock
	// The calls in flight: at most the module's warm instances (a swap
	// may change them; done has room for the most there can be).
	most := max(1, p.h.cfg.Timers.Calls)
	done := make(chan chunkDone, most)
	inflight, safetyInflight := 0, 0
	// A loop that ends (ctx, or a panic it recovers from) waits for its
	// calls: none outlives it.
	defer func() {
		for ; inflight > 0; inflight-- {
			<-done
		}
	}()
	var stages *passStages
	if so := p.h.stageObserver(); so != nil {
		stages = newPassStages(clock)
		p.pass.Store(stages)
		defer p.pass.Store(nil)
	}
	var sched dueSchedule
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
	settle := func(d chunkDone) {
		inflight--
		if d.safety {
			safetyInflight--
		}
		spec := p.spec()
		sched.resize(spec.Partitions)
		var sum abi.ScanResult
		scanned := 0
		fault := false
		for j, o := range d.outs {
			i := d.idxs[j]
			if i >= len(sched.busy) {
				continue // the partition count changed under the call
			}
			sched.busy[i] = false
			switch {
			case fault:
				// not reached after the fault: left due as it was
			case o.fault:
				scanned++
				fault = true
			case !o.ran: // not this host's: look again next interval (a gain wakes it)
				sched.next[i], sched.safety[i], sched.woken[i] = d.end.Add(spec.Interval), true, false
			default:
				scanned++
				sum.Add(o.res)
				t, known := p.nextScan(spec, o.res)
				sched.next[i], sched.safety[i], sched.woken[i] = t, !known, false
			}
			if at := sched.again[i]; !at.IsZero() {
				sched.again[i] = time.Time{}
				sched.wake(i, at)
			}
		}
		if stages != nil {
			stages.report(p.h.stageObserver(), d.tags)
		}
		if scanned > 0 {
			sweep.Version = p.mod.Load().Manifest().Version
			sweep.Duration += d.end.Sub(d.start)
			sweep.Result.Add(sum)
		}
		p.cycleSettled(cycle, sum, d.end.Sub(d.start))
	}
	dispatch := func(spec LoopSpec, idxs []int, now time.Time, safety bool) {
		tags := make([]string, len(idxs))
		for j, i := range idxs {
			sched.busy[i] = true
			tags[j] = model.Partition{Family: spec.Family, Index: uint16(i)}.Tag()
			if stages != nil {
				due := sched.next[i]
				if due.IsZero() {
					due = now
				}
				stages.take(p.name, i, tags[j], sched.woken[i], due, now)
			}
		}
		inflight++
		if safety {
			safetyInflight++
		}
		c := cycle
		go func() {
			start := clock.Now()
			outs := p.scanPartitions(ctx, c, idxs)
			done <- chunkDone{idxs: idxs, outs: outs, start: start, end: clock.Now(), tags: tags, safety: safety}
		}()
	}
	for {
		if until := p.quarantinedUntil(); !until.IsZero() {
			for inflight > 0 { // the calls in flight end first
				settle(<-done)
			}
			if !p.waitQuarantine(ctx) {
				return nil
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		spec := p.spec()
		sched.resize(spec.Partitions)
		calls := min(most, p.mod.Load().poolCap())
		now := clock.Now()
		if cycleStart.IsZero() || now.Sub(cycleStart) >= spec.Interval {
			flush()
			cycleStart = now
			sweep = p.beginCycle(now)
			cycle = sweep.Cycle
			inSweep = true
		}
		woken, keys := p.wake.take(spec.Partitions)
		later := p.probeWakes(ctx, keys)
		for i, at := range woken {
			if at.IsZero() {
				continue
			}
			if t, ok := later[i]; ok {
				sched.later(i, t, at)
			} else {
				sched.wake(i, at)
			}
		}
		// Due work first, split evenly over the free calls (at most
		// PartitionsPerCall each); then the safety polls.
		work, safety := sched.due(now)
		per := max(1, p.h.cfg.PartitionsPerCall)
		for free := calls - inflight; free > 0 && len(work) > 0; free-- {
			n := min(per, (len(work)+free-1)/free)
			dispatch(spec, work[:n:n], now, false)
			work = work[n:]
		}
		flowing := p.h.wakes.Up()
		for calls-inflight > 0 && len(safety) > 0 && (!flowing || safetyInflight == 0) {
			n := min(per, len(safety))
			dispatch(spec, safety[:n:n], now, true)
			safety = safety[n:]
		}
		var timer <-chan time.Time
		stop := func() {}
		if inflight < calls {
			// While a safety poll is in flight, the next one waits for it:
			// only known work arms the timer.
			withSafety := !flowing || safetyInflight == 0
			earliest := sched.earliest(cycleStart.Add(spec.Interval*time.Duration(p.h.cfg.Timers.SafetyFactor)), withSafety)
			if d := earliest.Sub(clock.Now()); d > 0 {
				timer, stop = p.h.afterPrecise(d)
			} else {
				continue // the clock moved past a due time since due() looked
			}
		}
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-timer:
		case <-p.wake.ch:
			stop()
		case <-p.kick:
			stop()
		case d := <-done:
			stop()
			settle(d)
			for more := true; more; {
				select {
				case d := <-done:
					settle(d)
				default:
					more = false
				}
			}
		}
	}
}

// nextScan is when a partition that returned res should be scanned next,
// and whether that is for known work: at once when its batch was full, at
// its next due time when it reported one, else after the safety interval
// (the plain interval while wake-ups are not flowing).
func (p *plugin) nextScan(spec LoopSpec, res abi.ScanResult) (time.Time, bool) {
	now := p.h.cfg.Clock.Now()
	if spec.BatchSize > 0 && res.Scanned >= spec.BatchSize && res.Acted > 0 {
		return now, true
	}
	safety := spec.Interval
	if p.h.wakes.Up() {
		safety *= time.Duration(p.h.cfg.Timers.SafetyFactor)
	}
	t := now.Add(safety)
	if res.NextDueMs > 0 {
		if due, ok := p.dueTime(res.NextDueMs); ok {
			if due.Before(t) {
				return due, true
			}
		}
	}
	return t, false
}

// dueTime is when, on the host's clock, the plugins' clock (Config.Now)
// first reads ms, so that an item of score ms is due to a scan then: the
// server clock's exact mapping when the host keeps one (the default Now)
// on the real clock, else the last server time a plugin of p read, dated
// when it was answered. Neither adds a margin: both readings are
// truncated to the millisecond, so at the returned time the clock reads
// ms or more. (A TIME re-read between now and then that dates the server
// later by up to its round trip can make the scan find the item not yet
// due; it reports it again, and the next timer uses the new reading.)
func (p *plugin) dueTime(ms int64) (time.Time, bool) {
	if sc := p.h.cfg.serverClock; sc != nil {
		if _, real := p.h.cfg.Clock.(systemClock); real {
			return sc.When(ms)
		}
	}
	return p.wake.dueAt(ms)
}
