// Command pg_delayed_promoter makes Postgres executions claimable that
// upstream FlowFabric never would (spec §5.1, §9 items 1 and 8): per
// partition it promotes delayed executions whose delay has passed
// (runnable / not_eligible_until_time with deadline_at_ms <= now →
// eligible_now) and executions upstream's create left "submitted"
// (→ runnable). Each promotion is one conditional UPDATE that re-checks the
// state, so a row changed since the scan is left alone.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{pgsql.DelayedScan, pgsql.PromoteDelayed, pgsql.SubmittedScan, pgsql.PromoteSubmitted}

// Plugin is the promoter, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_delayed_promoter", 750, 1000, 10000, pgsql.Grants(Statements...), nil),
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
