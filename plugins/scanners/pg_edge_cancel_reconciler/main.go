// Command pg_edge_cancel_reconciler drains sibling-cancel groups on
// Postgres (upstream ff-backend-postgres edge_cancel_dispatcher and
// edge_cancel_reconciler, RFC-016 Stages C and D, in one plugin): per
// partition it lists the ff_pending_cancel_groups rows, oldest first, and
// handles each in its own transaction with pdk/pgflow's DrainCancelGroup:
// a flagged group's unfinished siblings are cancelled (their leases
// released, a 'cancelled' completion event each) and the group cleared
// and dequeued; an unflagged or orphaned row is dequeued; a group another
// transaction holds is left for the next pass.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/pgflow"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{
	pgsql.EdgeCancelScan, pgsql.EdgeCancelLockGroup, pgsql.EdgeCancelGroupExists, pgsql.EdgeCancelMembers,
	pgsql.EdgeCancelReleaseAttempt, pgsql.EdgeCancelClearGroup, pgsql.EdgeCancelDequeue,
	pgsql.LeaseEventInsert, pgsql.CompletionInsert,
}

// Plugin is the reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_edge_cancel_reconciler", 1000, 50, 20000, pgsql.Grants(Statements...), nil),
	Scan:     scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	now, err := h.Now()
	if err != nil {
		return abi.ScanResult{Errors: 1}
	}
	pk := int64(req.Partition.Index)
	counts := map[pgflow.GroupAction]int{}
	var cancelled int
	res := pdk.RowScan{
		Candidates: pdk.Q(pgsql.EdgeCancelScan, pk, int64(req.BatchSize)),
		Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
			d, err := pgflow.DrainCancelGroup(s, pk, row[0].String(), row[1].String(), now)
			if err != nil {
				return false, err
			}
			counts[d.Action]++
			cancelled += d.Cancelled
			return d.Action != pgflow.GroupLocked, nil
		},
		OnError: func(row []abi.SQLValue, err error) {
			what := "scan"
			if len(row) > 1 {
				what = "group " + row[0].String() + "/" + row[1].String()
			}
			h.Log(abi.LogWarn, "edge cancel reconciler: "+what+": "+err.Error())
		},
	}.Run(h)
	for a, n := range counts {
		h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: "group." + string(a), Value: float64(n)})
	}
	if cancelled > 0 {
		h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: "cancelled", Value: float64(cancelled)})
	}
	return res
}
