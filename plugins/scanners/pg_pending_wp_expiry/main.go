// Command pg_pending_wp_expiry closes expired pending waitpoints on
// Postgres: upstream ff-backend-postgres's pending_wp_expiry hook, which
// upstream never drives on Postgres (spec §5.1), as a fabric scanner
// plugin. Per partition it lists pending waitpoints (never committed to a
// suspension) that expired, then in one transaction each:
//
//	ff_waitpoint_pending: row deleted (re-checked under its lock)
//	ff_suspension_current.member_map[key or id] = {status: never_committed, closed_at_ms, source}
//
// The statements are model/pgsql's, the same the native
// backend/postgres.ExpirePendingWaitpoints runs.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{pgsql.WaitpointExpiryScan, pgsql.WaitpointExpireDelete, pgsql.SuspensionMarkNeverCommitted}

// Plugin is the reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_pending_wp_expiry", 5000, 1000, 10000, pgsql.Grants(Statements...), nil),
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
	return pdk.RowScan{
		Candidates: pdk.Q(pgsql.WaitpointExpiryScan, pk, now, int64(req.BatchSize)),
		Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
			rs, err := pdk.Exec(s, pdk.Q(pgsql.WaitpointExpireDelete, pk, row[0].String(), now))
			if err != nil || len(rs[0].Rows) == 0 {
				return false, err // committed, extended or removed meanwhile
			}
			gone := rs[0].Rows[0]
			_, err = pdk.Exec(s, pdk.Q(pgsql.SuspensionMarkNeverCommitted, pk, gone[0].String(), gone[1].String(), now))
			return err == nil, err
		},
		OnError: func(_ []abi.SQLValue, err error) { h.Log(abi.LogWarn, "pending waitpoint expiry: "+err.Error()) },
	}.Run(h)
}
