package host

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/fabric-host/fabric/abi"
)

// DispatchRecord is one dispatcher call: the batch it handled and what it
// did. Latency tests read Start/End.
type DispatchRecord struct {
	Plugin      string         `json:"plugin"`
	Batch       uint64         `json:"batch"`
	Completions int            `json:"completions"`
	Start       time.Time      `json:"start"`
	End         time.Time      `json:"end"`
	Result      abi.ScanResult `json:"result"`
	Error       string         `json:"error,omitempty"`
	// Host is the id of the host that dispatched ("" with partition
	// leases off).
	Host string `json:"host,omitempty"`
	// Received is when the listener received the earliest completion
	// message of the batch (zero when the record's completions did not
	// come through the listener); FCallSent and FCallDone bound the
	// call's first FCALL batch (zero when it sent none). See Stages.
	Received  time.Time `json:"received,omitzero"`
	FCallSent time.Time `json:"fcall_sent,omitzero"`
	FCallDone time.Time `json:"fcall_done,omitzero"`
}

// drive hands completions to the dispatchers: it blocks for the first
// completion, takes whatever else is already queued (up to MaxBatch),
// keeps those of the flow partitions this host holds (with partition
// leases every host receives every completion and the partition's owner
// handles it; see ownedCompletions), and calls every dispatcher once with
// that batch, in plugin-name order (so "dependency" resolves edges before
// "edge_cancel" looks for the sibling groups they queued). Nothing polls:
// an idle driver waits on the queue.
func (h *Host) drive(ctx context.Context, queue <-chan queuedCompletion) {
	max := h.cfg.Completions.MaxBatch
	var batchNo uint64
	for {
		var first queuedCompletion
		select {
		case <-ctx.Done():
			return
		case first = <-queue:
		}
		// Every message is queued as it arrives, so the first of a batch
		// is its earliest.
		received := first.Received
		batch := []abi.Completion{first.Completion}
		seen := map[abi.Completion]bool{first.Completion: true}
	fill:
		for len(batch) < max {
			select {
			case q := <-queue:
				if !seen[q.Completion] { // every instance gets every publish; dedupe in-batch
					seen[q.Completion] = true
					batch = append(batch, q.Completion)
				}
			default:
				break fill
			}
		}
		ds := h.dispatchers()
		kept, deadline, release := h.ownedCompletions(batch, dispatchTimeout(ds))
		if len(kept) > 0 {
			batchNo++
			for _, p := range ds {
				h.dispatchTo(ctx, p, batchNo, kept, deadline, received)
			}
		}
		release()
	}
}

// dispatchTimeout is the longest timeout of the dispatchers ds.
func dispatchTimeout(ds []*plugin) time.Duration {
	var d time.Duration
	for _, p := range ds {
		d = max(d, time.Duration(p.mod.Load().Manifest().TimeoutMs)*time.Millisecond)
	}
	return d
}

// dispatchers returns the dispatcher plugins ready for a batch, by name.
func (h *Host) dispatchers() []*plugin {
	now := h.cfg.Clock.Now()
	h.mu.Lock()
	out := make([]*plugin, 0, 4)
	for _, p := range h.plugins {
		if p.mod.Load().Manifest().Kind != abi.KindDispatcher {
			continue
		}
		p.mu.Lock()
		ok := p.state == StateRunning || (p.state == StateQuarantined && !now.Before(p.quarantineUntil))
		p.mu.Unlock()
		if ok {
			out = append(out, p)
		} else {
			h.cfg.Logger.Debug("dispatcher not ready; completions left to the reconcilers", "plugin", p.name)
		}
	}
	h.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// dispatchTo calls p's fabric_dispatch once per chunk of its batch_size;
// every call ends by leaseDeadline (zero: no bound). received is when the
// listener received the batch's earliest message (zero: not through the
// listener).
func (h *Host) dispatchTo(ctx context.Context, p *plugin, batchNo uint64, batch []abi.Completion, leaseDeadline, received time.Time) {
	m := p.mod.Load()
	for !m.acquire() {
		m = p.mod.Load()
	}
	defer m.release(context.WithoutCancel(ctx))
	man := m.Manifest()
	size := int(man.BatchSize)
	for off := 0; off < len(batch); off += size {
		chunk := batch[off:min(off+size, len(batch))]
		if fault := h.dispatchChunk(ctx, p, m, batchNo, chunk, leaseDeadline, received); fault {
			h.cfg.Logger.Warn("dispatcher faulted; the batch's remaining completions are left to the reconcilers",
				"plugin", p.name, "batch", batchNo, "dropped", len(batch)-off)
			return
		}
	}
}

func (h *Host) dispatchChunk(ctx context.Context, p *plugin, m *Module, batchNo uint64, chunk []abi.Completion, leaseDeadline, received time.Time) bool {
	man := m.Manifest()
	timeout := time.Duration(man.TimeoutMs) * time.Millisecond
	req := abi.DispatchRequest{Batch: batchNo, Completions: chunk, DeadlineMs: man.TimeoutMs, Partitions: h.cfg.Partitions}
	in, _ := req.MarshalBinary()
	rec := DispatchRecord{Plugin: p.name, Batch: batchNo, Completions: len(chunk), Host: h.HostID(), Received: received}
	t, ok := p.slot(ctx)
	if !ok {
		return true // the host is stopping
	}
	caller := p.caller(m, "")
	caller.OnFCall = func(string) func() { // the guest's goroutine: no lock
		if !rec.FCallSent.IsZero() {
			return nil // the first batch only
		}
		rec.FCallSent = h.cfg.Clock.Now()
		return func() { rec.FCallDone = h.cfg.Clock.Now() }
	}
	rec.Start = h.cfg.Clock.Now()
	var res abi.ScanResult
	_, err := p.invoke(ctx, m, abi.ExportDispatch, in, caller, timeout, leaseDeadline, t, func(out []byte) error {
		if derr := res.UnmarshalBinary(out); derr != nil {
			return fmt.Errorf("%w: %w", ErrBadOutput, derr)
		}
		return nil
	})
	rec.End = h.cfg.Clock.Now()
	if err != nil && ctx.Err() != nil {
		return true
	}
	// Whatever cut it (its CPU time, its wall cap, its leases' deadline),
	// a call that failed is the plugin's fault — but one cut at its
	// leases' deadline while starved (errStarved).
	fault := isFault(err)
	p.mu.Lock()
	p.calls++
	p.lastRun = rec.End
	if err != nil {
		rec.Error = err.Error()
		if fault {
			p.countFault(err)
		}
	} else {
		rec.Result = res
		p.lastResult = res
		p.totals.Add(res)
		p.quarantines = 0
		if p.state == StateQuarantined {
			p.state, p.reason = StateRunning, ""
		}
	}
	p.mu.Unlock()
	switch {
	case fault:
		p.quarantine(err)
	case res.Acted > 0 || res.Errors > 0:
		h.cfg.Logger.Debug("dispatch batch done", "plugin", p.name, "batch", batchNo, "completions", len(chunk),
			"acted", res.Acted, "errors", res.Errors, "elapsed_us", rec.End.Sub(rec.Start).Microseconds())
	}
	if err == nil && !rec.FCallSent.IsZero() {
		h.observeDispatch(rec)
	}
	if s := h.cfg.Completions.Signals; s != nil {
		s.Dispatched.Signal(rec)
	}
	h.statusChanged(false)
	return err != nil
}
