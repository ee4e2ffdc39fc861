package host

import (
	"sync"
	"time"
)

// The stages of a partition scan on a due-time timer, in order, as
// StageEvent.Stages names them. Together they are where a due item's
// lateness goes: notification received or timer due → the loop took the
// partition → the plugin call started → the FCALL was sent → its replies
// came in (the items acted on: for the delayed promoter, eligible).
const (
	// StageWake: a wake notification received → the loop took its
	// partition.
	StageWake = "wake"
	// StageTimer: the partition's timer due → the loop took it.
	StageTimer = "timer"
	// StageQueue: the loop took the partition → the plugin call scanning
	// it started (earlier calls of the pass, a call slot, the lease).
	StageQueue = "queue"
	// StageCall: the plugin call started → it sent the partition's FCALL
	// batch (instance, server time, index reads).
	StageCall = "call"
	// StageFCall: the FCALL batch sent → its replies in.
	StageFCall = "fcall"
)

// StageEvent is one partition scan of a plugin on due-time timers that
// acted (sent an FCALL batch), with the time of each stage boundary by the
// host's Clock.
type StageEvent struct {
	// Plugin and Partition name the scan.
	Plugin    string
	Partition int
	// Woken: the loop took the partition for a wake notification (Due is
	// when the notification arrived); else for its timer (Due is when the
	// timer was due).
	Woken bool
	Due   time.Time
	// Taken is when the loop took the partition into a pass; CallStart
	// when the plugin call scanning it started; FCallSent and FCallDone
	// bound its first FCALL batch.
	Taken, CallStart, FCallSent, FCallDone time.Time
}

// StageDuration is one stage of a StageEvent.
type StageDuration struct {
	// Stage is one of StageWake, StageTimer, StageQueue, StageCall,
	// StageFCall.
	Stage    string
	Duration time.Duration
}

// Stages returns e's stages in order (StageWake or StageTimer first).
func (e StageEvent) Stages() []StageDuration {
	first := StageTimer
	if e.Woken {
		first = StageWake
	}
	return []StageDuration{
		{first, max(e.Taken.Sub(e.Due), 0)},
		{StageQueue, e.CallStart.Sub(e.Taken)},
		{StageCall, e.FCallSent.Sub(e.CallStart)},
		{StageFCall, e.FCallDone.Sub(e.FCallSent)},
	}
}

// StageObserver is an Observer that also receives the stage timings of
// every acting partition scan on due-time timers (internal/admin exports
// them as histograms).
//
// # Notes
//
//   - Called on the plugin's loop goroutine: implementations must be fast
//     and safe for concurrent use.
type StageObserver interface {
	StageDone(StageEvent)
}

// passStages collects the StageEvents of a timer loop's calls in flight,
// keyed by partition tag: the loop records when it took each partition,
// the plugin's hooks fill in call and FCALL times, and the loop reports a
// call's partitions once it is done.
type passStages struct {
	mu    sync.Mutex
	clock Clock
	byTag map[string]*StageEvent
}

func newPassStages(clock Clock) *passStages {
	return &passStages{clock: clock, byTag: map[string]*StageEvent{}}
}

// take records that the loop took partition i (tag) at taken, due at due.
func (s *passStages) take(plugin string, i int, tag string, woken bool, due, taken time.Time) {
	ev := &StageEvent{Plugin: plugin, Partition: i, Woken: woken, Due: due, Taken: taken}
	s.mu.Lock()
	s.byTag[tag] = ev
	s.mu.Unlock()
}

// called records that a plugin call scanning tags started.
func (s *passStages) called(tags ...string) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tags {
		if ev := s.byTag[t]; ev != nil {
			ev.CallStart = now
		}
	}
}

// fcall records an FCALL batch sent for tag; the func records its reply.
func (s *passStages) fcall(tag string) func() {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.byTag[tag]
	if ev == nil || !ev.FCallSent.IsZero() {
		return nil // only the first batch of a scan is timed
	}
	ev.FCallSent = now
	return func() {
		done := s.clock.Now()
		s.mu.Lock()
		ev.FCallDone = done
		s.mu.Unlock()
	}
}

// report hands the scans of tags that acted to obs and forgets tags.
func (s *passStages) report(obs StageObserver, tags []string) {
	var evs []StageEvent
	s.mu.Lock()
	for _, t := range tags {
		if ev := s.byTag[t]; ev != nil {
			delete(s.byTag, t)
			if !ev.FCallDone.IsZero() && !ev.CallStart.IsZero() {
				evs = append(evs, *ev)
			}
		}
	}
	s.mu.Unlock()
	for _, ev := range evs {
		obs.StageDone(ev)
	}
}

// stageObserver is the configured Observer when it takes stage timings.
func (h *Host) stageObserver() StageObserver {
	so, _ := h.cfg.Observer.(StageObserver)
	return so
}

// stagesCalled records, when the plugin's loop is timing a pass, that a
// plugin call scanning tags starts now.
func (p *plugin) stagesCalled(tags ...string) {
	if s := p.pass.Load(); s != nil {
		s.called(tags...)
	}
}

// stagesFCall is the Caller's OnFCall hook of a plugin on timers.
func (p *plugin) stagesFCall(tag string) func() {
	if s := p.pass.Load(); s != nil {
		return s.fcall(tag)
	}
	return nil
}

// StageHandOff is the first stage of a dispatcher call (DispatchRecord):
// the listener received the batch's earliest completion message → the
// dispatcher call started (the listener's queue, the driver, the
// dispatchers called before it, a call slot). StageCall, StageFCall and
// StageReturn follow it.
const StageHandOff = "handoff"

// StageReturn: the FCALL batch's replies in → the plugin call returned
// (the guest's own bookkeeping, its further batches).
const StageReturn = "return"

// Stages returns the stages of a dispatcher call that sent an FCALL
// batch, in order: StageHandOff (when the batch came through the
// listener), StageCall (call started → first FCALL batch sent: instance,
// guest, its reads), StageFCall (→ replies in) and StageReturn (→ call
// returned). Nil when the call sent no FCALL.
func (r DispatchRecord) Stages() []StageDuration {
	if r.FCallSent.IsZero() || r.FCallDone.IsZero() {
		return nil
	}
	var out []StageDuration
	if !r.Received.IsZero() {
		out = append(out, StageDuration{StageHandOff, max(r.Start.Sub(r.Received), 0)})
	}
	return append(out,
		StageDuration{StageCall, r.FCallSent.Sub(r.Start)},
		StageDuration{StageFCall, r.FCallDone.Sub(r.FCallSent)},
		StageDuration{StageReturn, max(r.End.Sub(r.FCallDone), 0)})
}

// DispatchObserver is an Observer that also receives every dispatcher call
// that sent an FCALL batch (internal/admin exports its Stages as
// histograms).
//
// # Notes
//
//   - Called on the completion driver's goroutine: implementations must
//     be fast and safe for concurrent use.
type DispatchObserver interface {
	DispatchDone(DispatchRecord)
}

// observeDispatch hands rec to the configured Observer when it takes
// dispatcher calls.
func (h *Host) observeDispatch(rec DispatchRecord) {
	if o, ok := h.cfg.Observer.(DispatchObserver); ok {
		o.DispatchDone(rec)
	}
}
