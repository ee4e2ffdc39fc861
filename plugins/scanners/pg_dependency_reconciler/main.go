// Command pg_dependency_reconciler resolves flow dependencies on Postgres
// (upstream ff-backend-postgres reconcilers/dependency with dispatch.rs's
// dispatch_completion): per partition it lists the ff_completion_event
// rows no dispatcher claimed that are older than stale_ms, oldest first.
// Each flow member's is handled in its own transaction with pdk/pgflow's
// DispatchCompletion: claim the event, advance the edge group of each
// outgoing edge, release a satisfied downstream, skip an impossible one
// (whose own 'skipped' event the next pass cascades), and queue sibling
// cancels for pg_edge_cancel_reconciler. Those of executions in no flow,
// most of a deployment's, are then claimed in bulk
// (pgsql.DependencyClaimFlowless: nothing to advance).
//
// This plugin is what moves flows on Postgres: `fabric run` sweeps it on a
// partition as soon as a member's completion is NOTIFYed there, and on its
// own interval as the safety net (stock: every second, rather than
// upstream's 15 s). A batch
// call (fabric_scan_batch, the host's sweep) first asks one indexed
// statement (pgsql.DependencyProbe) which of its partitions have such
// events, and scans only those: a sweep over 256 partitions is a handful
// of statements rather than one scan per partition.
//
// Configuration: "stale_ms" (default 1000): how old an unclaimed event
// must be, leaving a live dispatcher (a FlowFabric engine on the same
// database) the first chance. 0 takes every unclaimed event, whatever its
// committed_at_ms: that column is the database's clock, rounded to the
// millisecond, and a wake-up sweep running within a millisecond of the
// commit (or on a host whose clock lags the database's) would otherwise
// find the event not yet old enough and leave it to the next sweep.
package main

import (
	"math"
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/pgflow"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{
	pgsql.DependencyScanMembers, pgsql.DependencyProbe, pgsql.DependencyClaim, pgsql.DependencyClaimFlowless, pgsql.DependencyOutEdges, pgsql.EdgeGroupLock,
	pgsql.EdgeGroupWriteCounters, pgsql.DependencyReleaseChild, pgsql.DependencySkipChild,
	pgsql.EdgeGroupFlagSiblings, pgsql.PendingCancelEnqueue, pgsql.CompletionInsert,
}

// Plugin is the reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest:  pdk.SQLScanner("pg_dependency_reconciler", 1000, 1000, 20000, pgsql.Grants(Statements...), map[string]string{"stale_ms": "1000"}),
	Scan:      scan,
	ScanBatch: scanBatch,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	now, err := h.Now()
	if err != nil {
		return abi.ScanResult{Errors: 1}
	}
	return dispatch(h, req, now, staleBefore(h, now))
}

// staleBefore is the committed_at_ms bound of the events to take: now
// less stale_ms, or every event when stale_ms is 0.
func staleBefore(h pdk.Host, now int64) int64 {
	stale := int64(1000)
	if v, ok := h.Config("stale_ms"); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			stale = n
		}
	}
	if stale == 0 {
		return math.MaxInt64
	}
	return now - stale
}

// scanBatch dispatches on the partitions of a batch call that the probe
// names (all of them, each with Errors 1, when the probe fails).
func scanBatch(h pdk.Host, req abi.ScanBatchRequest) []abi.ScanResult {
	out := make([]abi.ScanResult, len(req.Indexes))
	fail := func(what string, err error) []abi.ScanResult {
		h.Log(abi.LogWarn, "dependency reconciler: "+what+": "+err.Error())
		for i := range out {
			out[i].Errors = 1
		}
		return out
	}
	now, err := h.Now()
	if err != nil {
		return fail("now", err)
	}
	s, err := pdk.SQLOf(h)
	if err != nil {
		return fail("sql", err)
	}
	before := staleBefore(h, now)
	rows, _, err := pdk.PartitionBatch(s, pgsql.DependencyProbe, req.Indexes, before)
	if err != nil {
		return fail("probe", err)
	}
	due := make(map[uint16]bool, len(rows))
	for _, row := range rows {
		due[uint16(row[0].AsInt())] = true
	}
	for i, idx := range req.Indexes {
		if due[idx] {
			out[i] = dispatch(h, req.Request(i), now, before)
		}
	}
	return out
}

// flowlessRounds bounds the bulk claims of one partition's standalone
// events per call; what is left waits for the next pass.
const flowlessRounds = 8

// dispatch handles req's partition's unclaimed events committed at or
// before before: first each flow member's event in a transaction of its
// own (a pushed sweep releases the child before anything else), then, in
// bulk, those of executions in no flow (pgsql.DependencyClaimFlowless:
// nothing to advance); one that fails leaves them to the next pass.
func dispatch(h pdk.Host, req abi.ScanRequest, now, before int64) abi.ScanResult {
	pk := int64(req.Partition.Index)
	var released, skipped, groups int
	res := pdk.RowScan{
		Candidates: pdk.Q(pgsql.DependencyScanMembers, pk, before, int64(req.BatchSize)),
		Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
			d, err := pgflow.DispatchCompletion(s, pk, row[0].AsInt(), now)
			if err == nil {
				released, skipped, groups = released+d.Released, skipped+d.Skipped, groups+d.CancelGroups
			}
			return d.Claimed, err
		},
		OnError: func(row []abi.SQLValue, err error) {
			what := "scan"
			if len(row) > 0 {
				what = "event " + row[0].String()
			}
			h.Log(abi.LogWarn, "dependency reconciler: "+what+": "+err.Error())
		},
	}.Run(h)
	flowless, failed := claimFlowless(h, pk, now, before, int64(req.BatchSize))
	res.Scanned += flowless
	res.Acted += flowless
	if failed {
		res.Errors++
	}
	for name, v := range map[string]int{"released": released, "skipped": skipped, "cancel_groups": groups, "standalone": int(flowless)} {
		if v > 0 {
			h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: name, Value: float64(v)})
		}
	}
	return res
}

// claimFlowless claims the partition's standalone completion events,
// limit a statement, and returns how many it claimed and whether a
// statement failed (logged).
func claimFlowless(h pdk.Host, pk, now, before, limit int64) (uint32, bool) {
	if limit <= 0 {
		limit = 1000
	}
	s, err := pdk.SQLOf(h)
	if err != nil {
		return 0, true
	}
	var claimed uint32
	for range flowlessRounds {
		rs, err := pdk.Exec(s, pdk.Q(pgsql.DependencyClaimFlowless, pk, before, now, limit))
		if err != nil {
			h.Log(abi.LogWarn, "dependency reconciler: standalone events: "+err.Error())
			return claimed, true
		}
		claimed += uint32(rs[0].RowsAffected)
		if rs[0].RowsAffected < limit {
			break
		}
	}
	return claimed, false
}
