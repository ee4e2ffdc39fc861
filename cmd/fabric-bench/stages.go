package main

import (
	"fmt"
	"strings"
	"sync"

	"github.com/fabric-host/fabric/host"
)

// stageRecorder is a host Observer that keeps the stage timings of every
// acting scan on due-time timers while on, to break a lateness p99 down.
type stageRecorder struct {
	mu    sync.Mutex
	on    bool
	scans int
	ms    map[string][]float64
}

func newStageRecorder() *stageRecorder { return &stageRecorder{ms: map[string][]float64{}} }

// SweepDone implements host.Observer.
func (r *stageRecorder) SweepDone(host.SweepEvent) {}

// StageDone implements host.StageObserver.
func (r *stageRecorder) StageDone(ev host.StageEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	r.scans++
	for _, st := range ev.Stages() {
		r.ms[st.Stage] = append(r.ms[st.Stage], float64(st.Duration.Microseconds())/1000)
	}
}

// start begins recording (events before it are dropped).
func (r *stageRecorder) start() {
	r.mu.Lock()
	r.on = true
	r.mu.Unlock()
}

// summary is the per-stage p50/p99 of what was recorded, in stage order.
func (r *stageRecorder) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scans == 0 {
		return "no acting scan on timers was recorded"
	}
	var parts []string
	for _, st := range []string{host.StageTimer, host.StageWake, host.StageQueue, host.StageCall, host.StageFCall} {
		xs := r.ms[st]
		if len(xs) == 0 {
			continue
		}
		p50, p99, mx := percentiles(xs)
		parts = append(parts, fmt.Sprintf("%s %s / %s (max %s, %d)", st, fmtNum(p50, "ms"), fmtNum(p99, "ms"), fmtNum(mx, "ms"), len(xs)))
	}
	return fmt.Sprintf("per-stage p50 / p99 over %d acting partition scans (host.StageEvent: timer = partition due → loop took it, wake = notification → taken, queue = taken → plugin call started, call = → FCALL sent, fcall = FCALL → replies): %s",
		r.scans, strings.Join(parts, "; "))
}
