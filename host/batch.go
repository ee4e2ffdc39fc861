package host

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

// partOutcome is what scanning one partition came to.
type partOutcome struct {
	res abi.ScanResult
	// fault: the call trapped, timed out or returned bad output (or the
	// host is stopping); the sweep ends.
	fault bool
	// ran: the partition was scanned (false when another host holds it,
	// or the sweep ended before it).
	ran bool
}

// hasExport reports whether the module exports name.
func (m *Module) hasExport(name string) bool { return slices.Contains(m.shape.Exports, name) }

// scanPartitions scans partitions idxs of sweep cycle, in order: up to
// Config.PartitionsPerCall of them per plugin call when the plugin exports
// fabric_scan_batch, else one call each. out[i] is idxs[i]'s outcome;
// after a fault the rest are not scanned.
func (p *plugin) scanPartitions(ctx context.Context, cycle uint64, idxs []int) []partOutcome {
	out := make([]partOutcome, len(idxs))
	per := p.h.cfg.PartitionsPerCall
	for off := 0; off < len(idxs); {
		if ctx.Err() != nil {
			return out
		}
		if per <= 1 || len(idxs)-off == 1 || !p.mod.Load().hasExport(abi.ExportScanBatch) {
			o := &out[off]
			o.res, o.fault, o.ran = p.scanPartition(ctx, cycle, idxs[off])
			off++
			if o.fault {
				return out
			}
			continue
		}
		end := min(off+per, len(idxs))
		fault, batched := p.scanChunk(ctx, cycle, idxs[off:end], out[off:end])
		if fault {
			return out
		}
		if batched {
			off = end
		}
		// else swapped to a plugin without the export: the next round
		// takes the one-partition path
	}
	return out
}

// scanChunk scans idxs in one fabric_scan_batch call, each partition under
// its own lease grant, and records one CycleRecord per partition. It
// reports whether the call faulted, and batched false (nothing done) when
// the module it acquired lacks the export (swapped since the caller
// looked).
func (p *plugin) scanChunk(ctx context.Context, cycle uint64, idxs []int, out []partOutcome) (fault, batched bool) {
	m := p.mod.Load()
	for !m.acquire() { // retired and closed between Load and acquire
		m = p.mod.Load()
	}
	defer m.release(context.WithoutCancel(ctx))
	if !m.hasExport(abi.ExportScanBatch) {
		return false, false
	}
	man := m.Manifest()
	fam := man.PartitionFamily()
	timeout := time.Duration(man.TimeoutMs) * time.Millisecond
	// The turn first, then the grants: waiting for a turn spends neither
	// the call's timeout nor its leases.
	t, ok := p.slot(ctx)
	if !ok {
		for i := range out {
			out[i] = partOutcome{fault: true, ran: true} // the host is stopping
		}
		return true, true
	}
	called := false
	defer func() {
		if !called {
			t.done(0, nil)
		}
	}()
	var (
		kept     []int // positions in idxs of the partitions this host may scan
		grants   []partlease.Grant
		batch    = make(map[uint16]string, len(idxs))
		deadline time.Time
		req      = abi.ScanBatchRequest{Cycle: cycle, Family: fam, Partitions: p.h.cfg.Partitions.Count(fam), BatchSize: man.BatchSize, DeadlineMs: man.TimeoutMs}
	)
	for i, idx := range idxs {
		part := model.Partition{Family: fam, Index: uint16(idx)}
		g, ok := p.h.beginPartition(part, timeout)
		if !ok {
			continue // another host's, or being handed off
		}
		defer g.End()
		kept, grants = append(kept, i), append(grants, g)
		batch[part.Index] = part.Tag()
		req.Indexes = append(req.Indexes, part.Index)
		if !g.Deadline.IsZero() && (deadline.IsZero() || g.Deadline.Before(deadline)) {
			deadline = g.Deadline
		}
	}
	if len(kept) == 0 {
		return false, true
	}
	in, err := req.MarshalBinary()
	if err != nil {
		panic(err) // PartitionsPerCall is validated against abi.MaxBatchPartitions
	}
	caller := p.caller(m, batch[req.Indexes[0]])
	caller.Batch = batch
	for _, tag := range batch {
		p.stagesCalled(tag)
	}
	start := p.h.cfg.Clock.Now()
	var res abi.ScanBatchResult
	called = true
	_, err = p.invoke(ctx, m, abi.ExportScanBatch, in, caller, timeout, deadline, t, func(raw []byte) error {
		if derr := res.UnmarshalBinary(raw); derr != nil {
			return fmt.Errorf("%w: %w", ErrBadOutput, derr)
		} else if len(res.Results) != len(kept) {
			return fmt.Errorf("%w: %s returned %d results for %d partitions", ErrBadOutput, abi.ExportScanBatch, len(res.Results), len(kept))
		}
		return nil
	})
	end := p.h.cfg.Clock.Now()
	if err != nil && ctx.Err() != nil {
		for _, i := range kept {
			out[i] = partOutcome{fault: true, ran: true} // the host is stopping: neither a record nor a fault
		}
		return true, true
	}
	recs := make([]CycleRecord, len(kept))
	results := make([]abi.ScanResult, len(kept))
	for j, i := range kept {
		recs[j] = CycleRecord{Plugin: p.name, Version: man.Version, SHA256: m.sha256, Partition: idxs[i], Cycle: cycle,
			Host: grants[j].Host, Token: grants[j].Token, Start: start, End: end, Wait: t.wait, Probation: t.probation}
		if err == nil {
			results[j] = res.Results[j]
		}
	}
	fault = p.settle(recs, results, err)
	for j, i := range kept {
		out[i] = partOutcome{res: results[j], fault: fault, ran: true}
	}
	return fault, true
}
