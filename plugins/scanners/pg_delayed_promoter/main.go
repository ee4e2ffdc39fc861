// Command pg_delayed_promoter makes Postgres executions claimable that
// upstream FlowFabric never would (spec §5.1, §9 items 1 and 8): per
// partition it promotes delayed executions whose delay has passed
// (runnable / not_eligible_until_time with deadline_at_ms <= now →
// eligible_now) and executions upstream's create left "submitted"
// (→ runnable). Each promotion is one conditional UPDATE that re-checks the
// state, so a row changed since the scan is left alone.
//
// A batch call (fabric_scan_batch, the host's sweep) asks one statement
// which of its partitions have anything to promote (pgsql.PromoteProbe)
// and promotes on those at once in another (pgsql.PromoteBatch: the same
// conditional writes, set-based): a sweep over 256 partitions is 8
// statements, plus 8 at most when work is due, rather than two scans per
// partition and three round trips per promotion. So it runs every 250 ms,
// and a delayed execution waits about that long past its due time, not
// the seconds a sweep took on a loaded machine.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{pgsql.DelayedScan, pgsql.PromoteDelayed, pgsql.SubmittedScan, pgsql.PromoteSubmitted, pgsql.PromoteProbe, pgsql.PromoteBatch}

// Plugin is the promoter, registered in init.
var Plugin = pdk.Plugin{
	Manifest:  pdk.SQLScanner("pg_delayed_promoter", 250, 1000, 10000, pgsql.Grants(Statements...), nil),
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
	return promote(h, req, now)
}

// scanBatch promotes on the partitions of a batch call that PromoteProbe
// names, with PromoteBatch: each promoted row counts as scanned and acted
// on its partition. A failed probe counts one error on every partition;
// a failed PromoteBatch (it rolled back) one on each partition it named
// and on those after them.
func scanBatch(h pdk.Host, req abi.ScanBatchRequest) []abi.ScanResult {
	out := make([]abi.ScanResult, len(req.Indexes))
	pos := make(map[uint16]int, len(req.Indexes))
	for i, idx := range req.Indexes {
		pos[idx] = i
	}
	fail := func(err error, idxs []uint16) []abi.ScanResult {
		h.Log(abi.LogWarn, "promote: "+err.Error())
		for _, idx := range idxs {
			out[pos[idx]].Errors = 1
		}
		return out
	}
	now, err := h.Now()
	if err != nil {
		return fail(err, req.Indexes)
	}
	s, err := pdk.SQLOf(h)
	if err != nil {
		return fail(err, req.Indexes)
	}
	rows, _, err := pdk.PartitionBatch(s, pgsql.PromoteProbe, req.Indexes, now)
	if err != nil {
		return fail(err, req.Indexes)
	}
	found := make(map[uint16]bool, len(rows))
	for _, row := range rows {
		found[uint16(row[0].AsInt())] = true
	}
	var due []uint16
	for _, idx := range req.Indexes {
		if found[idx] {
			due = append(due, idx)
		}
	}
	if len(due) == 0 {
		return out
	}
	rows, done, err := pdk.PartitionBatch(s, pgsql.PromoteBatch, due, now, int64(req.BatchSize))
	for _, row := range rows {
		if i, ok := pos[uint16(row[0].AsInt())]; ok {
			out[i].Scanned++
			out[i].Acted++
		}
	}
	if err != nil {
		return fail(err, due[done:])
	}
	return out
}

// promote promotes what is due by now on req's partition.
func promote(h pdk.Host, req abi.ScanRequest, now int64) abi.ScanResult {
	pk := int64(req.Partition.Index)
	var res abi.ScanResult
	for _, pass := range []struct{ scan, promote pgsql.Statement }{
		{pgsql.DelayedScan, pgsql.PromoteDelayed},
		{pgsql.SubmittedScan, pgsql.PromoteSubmitted},
	} {
		promote := pass.promote
		res.Add(pdk.RowScan{
			Candidates: pdk.Q(pass.scan, pk, now, int64(req.BatchSize)),
			Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
				rs, err := pdk.Exec(s, pdk.Q(promote, pk, row[0].String(), now))
				return err == nil && rs[0].RowsAffected == 1, err
			},
			OnError: func(_ []abi.SQLValue, err error) { h.Log(abi.LogWarn, "promote: "+err.Error()) },
		}.Run(h))
	}
	return res
}
