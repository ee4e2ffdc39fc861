// Command pg_retention trims terminal Postgres executions older than the
// retention period (upstream trim_retention, which nothing drives on
// Postgres, spec §5.1 / §9 item 12): per partition it lists terminal
// executions that ended at or before now - retention_ms and deletes each
// with its child rows in one transaction: attempts, claim grants,
// completion events, stream frames/meta/summary, suspension, waitpoints,
// and the lease / signal / operator outbox rows (by bare uuid), then the
// execution row itself, re-checked; a row that is no longer terminal
// (replayed meanwhile) rolls the whole transaction back.
//
// Configuration: "retention_ms" (default 86400000, one day).
package main

import (
	"errors"
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = append([]pgsql.Statement{pgsql.RetentionScan, pgsql.RetentionDeleteExecCore}, pgsql.RetentionDeleteChildren...)

// Plugin is the trimmer, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_retention", 60000, 500, 20000, pgsql.Grants(Statements...), map[string]string{"retention_ms": "86400000"}),
	Scan:     scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

// errChanged rolls back a trim whose execution is no longer trimmable.
var errChanged = errors.New("execution changed since the scan")

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	now, err := h.Now()
	if err != nil {
		return abi.ScanResult{Errors: 1}
	}
	retention := int64(86400000)
	if v, ok := h.Config("retention_ms"); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			retention = n
		}
	}
	cutoff := now - retention
	pk := int64(req.Partition.Index)
	var changed uint32
	res := pdk.RowScan{
		Candidates: pdk.Q(pgsql.RetentionScan, pk, cutoff, int64(req.BatchSize)),
		Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
			eid := row[0].String()
			stmts := make([]abi.SQLStatement, 0, len(pgsql.RetentionDeleteChildren)+1)
			for _, d := range pgsql.RetentionDeleteChildren {
				stmts = append(stmts, pdk.Q(d, pk, eid))
			}
			stmts = append(stmts, pdk.Q(pgsql.RetentionDeleteExecCore, pk, eid, cutoff))
			rs, err := pdk.Exec(s, stmts...)
			if err != nil {
				return false, err
			}
			if rs[len(rs)-1].RowsAffected != 1 {
				return false, errChanged
			}
			return true, nil
		},
		OnError: func(_ []abi.SQLValue, err error) {
			if errors.Is(err, errChanged) {
				changed++
				return
			}
			h.Log(abi.LogWarn, "retention: "+err.Error())
		},
	}.Run(h)
	// A row replayed since the scan is skipped, not an error.
	res.Errors -= changed
	res.Skipped += changed
	return res
}
