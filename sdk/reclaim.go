package sdk

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// reclaimHeads is how many due lease_expiry members a reclaim pass reads
// per partition: members of other lanes, or leases not yet marked
// expired, must not hide the reclaimable ones behind them.
const reclaimHeads = 16

// reclaimDue is the worker's reclaim pass, at most once per
// reclaimReadEvery whether or not the worker is busy: it reads the due
// heads of lease_expiry on the worker's solo partitions and on the next
// window of PartitionScanChunk flow partitions (so every partition is
// read within Flow/PartitionScanChunk passes), pre-reads the candidates'
// state in one pipelined round trip, and takes over the first one that is
// marked expired (or revoked) on one of its lanes with capabilities it
// has. A candidate past its reclaim limit is failed terminally by
// ff_reclaim_execution itself (max_reclaims_exceeded).
// reclaimPending reports whether the next ClaimBatch would run a reclaim
// pass (reclaimDue), without starting one.
func (w *Worker) reclaimPending() bool {
	if w.cfg.DisableReclaim {
		return false
	}
	now := w.cfg.Clock()
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	return w.reclaimAt.IsZero() || now.Sub(w.reclaimAt) >= reclaimReadEvery || now.Before(w.reclaimAt)
}

func (w *Worker) reclaimDue(ctx context.Context) (*Lease, error) {
	if w.cfg.DisableReclaim {
		return nil, nil
	}
	now := w.cfg.Clock()
	w.scanMu.Lock()
	if !w.reclaimAt.IsZero() && now.Sub(w.reclaimAt) < reclaimReadEvery && !now.Before(w.reclaimAt) {
		w.scanMu.Unlock()
		return nil, nil
	}
	w.reclaimAt = now
	w.scanMu.Unlock()

	n := uint64(w.parts.Flow)
	chunk := min(uint64(PartitionScanChunk), n)
	start := w.reclaimCursor.Add(chunk) - chunk
	parts := append([]model.Partition(nil), w.soloParts...)
	for s := range chunk {
		p := model.Partition{Family: model.FamilyFlow, Index: uint16((start + s) % n)}
		if _, solo := w.soloLanes[p]; !solo {
			parts = append(parts, p)
		}
	}
	raw := w.vc.Raw()
	due := fmt.Sprint(now.UnixMilli())
	cmds := make(vk.Commands, len(parts))
	for i, p := range parts {
		cmds[i] = raw.B().Zrangebyscore().Key(model.KeysOn(p).LeaseExpiry()).Min("-inf").Max(due).Limit(0, reclaimHeads).Build()
	}
	var ids []model.ExecutionID
	for i, r := range raw.DoMulti(ctx, cmds...) {
		members, err := r.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("sdk: read due leases: %w", err)
		}
		for _, m := range members {
			id, err := model.ParseExecutionID(m)
			if err != nil || id.Partition() != parts[i] {
				w.log.Warn("skipping malformed index member", "member", m, "partition", parts[i].Tag())
				continue
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// One round trip tells which candidates are this worker's to reclaim.
	reads := make(vk.Commands, len(ids))
	for i, id := range ids {
		reads[i] = raw.B().Hmget().Key(model.KeysFor(id).Core()).Field("lifecycle_phase", "ownership_state", "lane_id").Build()
	}
	for i, r := range raw.DoMulti(ctx, reads...) {
		f, err := r.ToArray()
		if err != nil || len(f) != 3 {
			continue
		}
		phase, _ := f[0].ToString()
		own, _ := f[1].ToString()
		lane, _ := f[2].ToString()
		if phase != model.PhaseActive || (own != model.OwnershipLeaseExpiredReclaimable && own != model.OwnershipLeaseRevoked) ||
			!w.servesLane(lane) {
			continue
		}
		l, err := w.tryReclaim(ctx, candidate{id: ids[i], lane: lane})
		if err != nil || l != nil {
			return l, err
		}
	}
	return nil, nil
}
