// Package pgflow is flow dependency resolution and sibling cancel on the
// Postgres backend, written once over pdk.SQLHost: the
// pg_dependency_reconciler and pg_edge_cancel_reconciler plugins run it in
// wasm, and a Go caller can run the same code natively (host.NativeHost
// with a SQL session). The statements are model/pgsql's.
//
// It follows upstream ff-backend-postgres (dispatch.rs,
// reconcilers/dependency, edge_cancel_dispatcher, edge_cancel_reconciler)
// with these differences, each deliberate:
//
//   - One transaction per completion event: the dispatch claim and every
//     edge hop commit together, so a hop that fails leaves the event
//     unclaimed for the next pass (upstream commits the claim first and
//     loses the hop, spec §9 item 7). Groups are locked in downstream-id
//     order, so two dispatchers never deadlock on them.
//   - A group acts on the transition of its decision (pending →
//     satisfied, pending → impossible), not on every event that finds it
//     decided, so late events of an already-decided group (a cancelled
//     sibling's own completion) only update counters.
//   - A satisfied downstream is released only while it is still blocked by
//     dependencies, and an impossible one is skipped only while it has not
//     started: upstream also flips running, suspended or delayed
//     executions.
//   - A cancelled sibling's live lease is released (attempt outcome
//     cancelled, ff_lease_event revoked) and a 'cancelled' completion event
//     is written, as FlowFabric's Valkey cancel publishes one: its own
//     children resolve and subscribers see it. Upstream leaves the lease
//     alive and writes no event (spec §9 item 5).
//   - Per partition rather than one global scan (flow members, edges and
//     groups share a partition_key), so the plugins need no cross-partition
//     grant; the scan and claim are pruned to one partition.
//   - The edge-cancel reconciler does both upstream stages: a flagged
//     group's siblings are cancelled and the group drained (Stage C, the
//     dispatcher); an unflagged or orphaned pending row is deleted (Stage
//     D). A group another transaction holds is skipped (SKIP LOCKED).
package pgflow

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/edgegroup"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Dispatch is what DispatchCompletion did.
type Dispatch struct {
	// Claimed is false when another dispatcher had claimed the event.
	Claimed bool
	// Edges counts the outgoing edges advanced.
	Edges int
	// Released and Skipped count downstreams made claimable or skipped.
	Released, Skipped int
	// CancelGroups counts groups flagged for sibling cancel.
	CancelGroups int
}

// DispatchCompletion claims completion event eventID of partition pk and
// advances the edge group of each of its execution's outgoing edges, in
// the caller's transaction (pdk.Tx / pdk.RowScan):
//
//	ff_completion_event: dispatched_at_ms = now (no row: already claimed, nothing else)
//	per outgoing edge, the downstream's ff_edge_group locked FOR UPDATE:
//	  running-1, success / fail / skip +1 by the outcome
//	  pending → satisfied: downstream still blocked by dependencies →
//	    eligible_now / waiting; any_of / quorum cancelling the rest: the
//	    group's unfinished other upstreams listed, flagged, queued in
//	    ff_pending_cancel_groups
//	  pending → impossible: downstream not started → terminal / skipped,
//	    its own 'skipped' completion event (the next pass cascades it)
func DispatchCompletion(s pdk.SQLHost, pk, eventID, now int64) (Dispatch, error) {
	var d Dispatch
	rs, err := pdk.Exec(s, pdk.Q(pgsql.DependencyClaim, pk, eventID, now))
	if err != nil || len(rs[0].Rows) == 0 {
		return d, err
	}
	d.Claimed = true
	ev := rs[0].Rows[0]
	eid, flow, outcome := ev[0].String(), ev[1].String(), ev[2].String()
	if flow == "" {
		return d, nil // a standalone execution
	}
	rs, err = pdk.Exec(s, pdk.Q(pgsql.DependencyOutEdges, pk, flow, eid))
	if err != nil {
		return d, err
	}
	bucket := edgegroup.BucketOf(outcome)
	for _, row := range rs[0].Rows {
		if err := advance(s, pk, flow, eid, row[0].String(), bucket, now, &d); err != nil {
			return d, err
		}
		d.Edges++
	}
	return d, nil
}

// advance is one edge hop: upstream eid of flow ended in bucket b.
func advance(s pdk.SQLHost, pk int64, flow, eid, down string, b edgegroup.Bucket, now int64, d *Dispatch) error {
	rs, err := pdk.Exec(s, pdk.Q(pgsql.EdgeGroupLock, pk, flow, down))
	if err != nil || len(rs[0].Rows) == 0 {
		return err // no group: nothing to advance (upstream: a no-op)
	}
	g := rs[0].Rows[0]
	p := edgegroup.DecodePolicy(g[0].String(), g[1].AsInt(), g[2].String())
	before := edgegroup.Counters{Success: g[3].AsInt(), Fail: g[4].AsInt(), Skip: g[5].AsInt(), Running: g[6].AsInt()}
	after := before.Advance(b)
	stmts := []abi.SQLStatement{pdk.Q(pgsql.EdgeGroupWriteCounters, pk, flow, down, after.Success, after.Fail, after.Skip, after.Running)}
	was, is := edgegroup.Evaluate(p, before), edgegroup.Evaluate(p, after)
	if was == is {
		_, err := pdk.Exec(s, stmts...)
		return err
	}
	switch is {
	case edgegroup.Satisfied:
		stmts = append(stmts, pdk.Q(pgsql.DependencyReleaseChild, pk, down, now))
		if p.CancelRemaining {
			stmts = append(stmts, pdk.Q(pgsql.EdgeGroupFlagSiblings, pk, flow, down, eid))
		}
		rs, err := pdk.Exec(s, stmts...)
		if err != nil {
			return err
		}
		d.Released += int(rs[1].RowsAffected)
		if p.CancelRemaining && len(rs[2].Rows) == 1 {
			if _, err := pdk.Exec(s, pdk.Q(pgsql.PendingCancelEnqueue, pk, flow, down, now)); err != nil {
				return err
			}
			d.CancelGroups++
		}
	case edgegroup.Impossible:
		stmts = append(stmts, pdk.Q(pgsql.DependencySkipChild, pk, down, now))
		rs, err := pdk.Exec(s, stmts...)
		if err != nil {
			return err
		}
		if rs[1].RowsAffected == 1 {
			if _, err := pdk.Exec(s, pdk.Q(pgsql.CompletionInsert, pk, down, model.OutcomeSkipped, now, false)); err != nil {
				return err
			}
			d.Skipped++
		}
	default:
		_, err := pdk.Exec(s, stmts...)
		return err
	}
	return nil
}

// GroupAction is what DrainCancelGroup did with a pending group.
type GroupAction string

// Group actions; the first three change the database.
const (
	// GroupDrained: the flagged group's siblings were cancelled, the group
	// cleared and dequeued (upstream Stage C "dispatched").
	GroupDrained GroupAction = "drained"
	// GroupStale: the group was not flagged; dequeued (Stage D
	// "sremmed_stale").
	GroupStale GroupAction = "stale"
	// GroupOrphaned: the group row is gone; dequeued.
	GroupOrphaned GroupAction = "orphaned"
	// GroupLocked: another transaction holds the group; left for later.
	GroupLocked GroupAction = "locked"
)

// Drain is what DrainCancelGroup did.
type Drain struct {
	Action GroupAction
	// Cancelled counts the siblings cancelled; Leases those of them whose
	// live lease was released.
	Cancelled, Leases int
}

// batchMax bounds the statements of one sql_query request.
const batchMax = 1000

// DrainCancelGroup handles one ff_pending_cancel_groups row of partition
// pk in the caller's transaction:
//
//	edge group locked elsewhere (SKIP LOCKED): nothing
//	edge group gone, or not flagged: pending row deleted
//	flagged: each listed sibling not yet terminal →
//	  ff_exec_core terminal / cancelled, reason sibling_quorum_satisfied, by engine;
//	  its live attempt lease released (ff_attempt outcome cancelled,
//	  ff_lease_event revoked); ff_completion_event 'cancelled';
//	  then the group's flag and members cleared and the pending row deleted
func DrainCancelGroup(s pdk.SQLHost, pk int64, flow, down string, now int64) (Drain, error) {
	var d Drain
	rs, err := pdk.Exec(s, pdk.Q(pgsql.EdgeCancelLockGroup, pk, flow, down))
	if err != nil {
		return d, err
	}
	dequeue := pdk.Q(pgsql.EdgeCancelDequeue, pk, flow, down)
	if len(rs[0].Rows) == 0 {
		rs, err := pdk.Exec(s, pdk.Q(pgsql.EdgeCancelGroupExists, pk, flow, down))
		if err != nil {
			return d, err
		}
		if rs[0].Rows[0][0].AsInt() > 0 {
			d.Action = GroupLocked
			return d, nil
		}
		d.Action = GroupOrphaned
		_, err = pdk.Exec(s, dequeue)
		return d, err
	}
	if !rs[0].Rows[0][0].Bool {
		d.Action = GroupStale
		_, err = pdk.Exec(s, dequeue)
		return d, err
	}
	rs, err = pdk.Exec(s, pdk.Q(pgsql.EdgeCancelMembers, pk, flow, down, now))
	if err != nil {
		return d, err
	}
	cancelled := rs[0].Rows
	d.Cancelled = len(cancelled)
	for off := 0; off < len(cancelled); off += batchMax / 2 {
		chunk := cancelled[off:min(off+batchMax/2, len(cancelled))]
		release := make([]abi.SQLStatement, len(chunk))
		for i, m := range chunk {
			release[i] = pdk.Q(pgsql.EdgeCancelReleaseAttempt, pk, m[0].String(), m[1].AsInt(), now)
		}
		rs, err := pdk.Exec(s, release...)
		if err != nil {
			return d, err
		}
		events := make([]abi.SQLStatement, 0, 2*len(chunk))
		for i, m := range chunk {
			if rs[i].RowsAffected > 0 {
				d.Leases++
				events = append(events, pdk.Q(pgsql.LeaseEventInsert, m[0].String(), "revoked", now, pk))
			}
			events = append(events, pdk.Q(pgsql.CompletionInsert, pk, m[0].String(), model.OutcomeCancelled, now, false))
		}
		if _, err := pdk.Exec(s, events...); err != nil {
			return d, err
		}
	}
	if _, err := pdk.Exec(s, pdk.Q(pgsql.EdgeCancelClearGroup, pk, flow, down), dequeue); err != nil {
		return d, err
	}
	d.Action = GroupDrained
	return d, nil
}
