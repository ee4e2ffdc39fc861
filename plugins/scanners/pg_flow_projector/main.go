// Command pg_flow_projector projects Postgres flow summaries
// (ff_flow_summary, migration 0019): upstream ff-backend-postgres's
// project_flow_summary, which nothing drives on Postgres (spec §5.1), as a
// fabric scanner plugin. Per partition it takes the flows with members
// never projected, then the least recently projected, and upserts each
// one's summary: members counted by public_state and the derived state
// (failed / completed / running / blocked / open, as Valkey's flow
// projector derives it). ff_flow_core.public_flow_state is never written.
//
// The statements are model/pgsql's, the same the native
// backend/postgres.ProjectFlowSummaries runs.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{pgsql.FlowSummaryScan, pgsql.FlowSummaryProject}

// Plugin is the projector, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_flow_projector", 15000, 100, 10000, pgsql.Grants(Statements...), nil),
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
		Candidates: pdk.Q(pgsql.FlowSummaryScan, pk, now, int64(req.BatchSize)),
		Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
			rs, err := pdk.Exec(s, pdk.Q(pgsql.FlowSummaryProject, pk, row[0].String(), now))
			return err == nil && len(rs[0].Rows) == 1, err
		},
		OnError: func(_ []abi.SQLValue, err error) { h.Log(abi.LogWarn, "flow projector: "+err.Error()) },
	}.Run(h)
}
