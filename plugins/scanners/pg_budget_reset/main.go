// Command pg_budget_reset is the Postgres budget-reset reconciler as a
// fabric scanner plugin (upstream ff-backend-postgres
// reconcilers/budget_reset), on the budget partitions: per partition it
// lists up to 20 budgets whose next_reset_at_ms has come, then resets each
// in its own transaction that re-checks it under its row lock:
//
//	ff_budget_policy: breach cleared (counts kept), next reset one reset_interval_ms on (none when 0)
//	ff_budget_usage:  every dimension zeroed, last_reset_at_ms now
//
// The statements are model/pgsql's, the same the native
// backend/postgres.ResetBudgetsDue runs.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{pgsql.BudgetResetScan, pgsql.BudgetResetPolicy, pgsql.BudgetResetUsage}

// Plugin is the reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: func() abi.Manifest {
		m := pdk.SQLScanner("pg_budget_reset", 15000, 20, 10000, pgsql.Grants(Statements...), nil)
		m.Family = "budget"
		return m
	}(),
	Scan: scan,
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
		Candidates: pdk.Q(pgsql.BudgetResetScan, pk, now, int64(req.BatchSize)),
		Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
			id := row[0].String()
			rs, err := pdk.Exec(s, pdk.Q(pgsql.BudgetResetPolicy, pk, id, now))
			if err != nil || len(rs[0].Rows) == 0 {
				return false, err // reset meanwhile, or gone
			}
			_, err = pdk.Exec(s, pdk.Q(pgsql.BudgetResetUsage, pk, id, now))
			return err == nil, err
		},
		OnError: func(row []abi.SQLValue, err error) { h.Log(abi.LogWarn, "budget reset: "+rowID(row)+": "+err.Error()) },
	}.Run(h)
}

func rowID(row []abi.SQLValue) string {
	if len(row) == 0 {
		return "scan"
	}
	return row[0].String()
}
