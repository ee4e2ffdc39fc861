// Command pg_execution_deadline ends Postgres executions whose execution
// deadline passed: upstream ff-backend-postgres's execution_deadline hook,
// which upstream never drives on Postgres (spec §5.1), as a fabric scanner
// plugin, for active, suspended and runnable (not delayed) executions as
// Valkey's ff_expire_execution does. Per partition it lists the overdue
// executions, then handles each in its own transaction that re-reads it
// under lock (pgsql.DeadlineExpires):
//
//	active:    attempt interrupted, lease cleared; ff_lease_event 'expired'
//	suspended: ff_suspension_current row deleted
//	always:    execution terminal / expired (failure_reason execution_deadline),
//	           ff_completion_event 'expired'
//
// The statements are model/pgsql's, the same the native
// backend/postgres.ExpireExecutionDeadlines runs.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{
	pgsql.ExecDeadlineScan, pgsql.ExecDeadlineLock, pgsql.AttemptInterrupt, pgsql.SuspensionDelete,
	pgsql.ExecCoreExpireDeadline, pgsql.CompletionInsert, pgsql.LeaseEventInsert,
}

// Plugin is the reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_execution_deadline", 5000, 1000, 10000, pgsql.Grants(Statements...), nil),
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
		Candidates: pdk.Q(pgsql.ExecDeadlineScan, pk, now, int64(req.BatchSize)),
		Handle:     func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) { return expire(s, pk, row[0].String(), now) },
		OnError: func(row []abi.SQLValue, err error) {
			id := "scan"
			if len(row) > 0 {
				id = row[0].String()
			}
			h.Log(abi.LogWarn, "execution deadline: "+id+": "+err.Error())
		},
	}.Run(h)
}

// expire is the per-row transaction body.
func expire(s pdk.SQLHost, pk int64, eid string, now int64) (bool, error) {
	rs, err := pdk.Exec(s, pdk.Q(pgsql.ExecDeadlineLock, pk, eid))
	if err != nil || len(rs[0].Rows) == 0 {
		return false, err
	}
	row := rs[0].Rows[0]
	idx, phase, elig, deadline := row[0].AsInt(), row[1].String(), row[2].String(), row[3]
	if !pgsql.DeadlineExpires(phase, elig, !deadline.IsNull(), deadline.AsInt(), now) {
		return false, nil
	}
	var stmts []abi.SQLStatement
	switch phase {
	case model.PhaseActive:
		stmts = append(stmts, pdk.Q(pgsql.AttemptInterrupt, pk, eid, idx, now))
	case model.PhaseSuspended:
		stmts = append(stmts, pdk.Q(pgsql.SuspensionDelete, pk, eid))
	}
	stmts = append(stmts, pdk.Q(pgsql.ExecCoreExpireDeadline, pk, eid, now),
		pdk.Q(pgsql.CompletionInsert, pk, eid, model.OutcomeExpired, now, false))
	if phase == model.PhaseActive {
		stmts = append(stmts, pdk.Q(pgsql.LeaseEventInsert, eid, "expired", now, pk))
	}
	_, err = pdk.Exec(s, stmts...)
	return err == nil, err
}
