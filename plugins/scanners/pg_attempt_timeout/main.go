// Command pg_attempt_timeout is the Postgres attempt-timeout reconciler as
// a fabric scanner plugin (upstream ff-backend-postgres
// reconcilers/attempt_timeout): per partition, it lists active executions
// whose current attempt passed its own deadline (the claim's now +
// timeout_policy.attempt_timeout_ms; not the lease's expiry, which is
// pg_lease_expiry's and leads to a reclaim), then handles each in its own
// transaction that re-reads the execution and the attempt under lock:
//
//	attempt: outcome interrupted, lease cleared, terminal_at_ms now
//	retries left: execution runnable / eligible_now / pending_retry_attempt, next attempt
//	exhausted:    execution terminal / expired, ff_completion_event 'expired'
//	always:       ff_lease_event 'expired'
//
// The statements are model/pgsql's, the same the native
// backend/postgres.ReconcileAttemptTimeouts runs.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{
	pgsql.AttemptTimeoutScan, pgsql.ExecCoreLock, pgsql.AttemptLockDeadline, pgsql.AttemptInterrupt,
	pgsql.ExecCoreRetryAfterTimeout, pgsql.ExecCoreExpireAfterTimeout, pgsql.CompletionInsert, pgsql.LeaseEventInsert,
}

// Plugin is the reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_attempt_timeout", 2000, 1000, 10000, pgsql.Grants(Statements...), nil),
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
		Candidates: pdk.Q(pgsql.AttemptTimeoutScan, pk, now, int64(req.BatchSize)),
		Handle:     func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) { return expire(s, pk, row[0].String(), now) },
		OnError: func(row []abi.SQLValue, err error) {
			h.Log(abi.LogWarn, "attempt timeout: "+rowID(row)+": "+err.Error())
		},
	}.Run(h)
}

func rowID(row []abi.SQLValue) string {
	if len(row) == 0 {
		return "scan"
	}
	return row[0].String()
}

// expire is the per-row transaction body (upstream expire_one).
func expire(s pdk.SQLHost, pk int64, eid string, now int64) (bool, error) {
	rs, err := pdk.Exec(s, pdk.Q(pgsql.ExecCoreLock, pk, eid))
	if err != nil || len(rs[0].Rows) == 0 {
		return false, err
	}
	core := rs[0].Rows[0]
	idx, phase, maxRetries := core[0].AsInt(), core[1].String(), core[2].AsInt()
	if phase != model.PhaseActive {
		return false, nil
	}
	if rs, err = pdk.Exec(s, pdk.Q(pgsql.AttemptLockDeadline, pk, eid, idx)); err != nil || len(rs[0].Rows) == 0 {
		return false, err
	}
	if exp := rs[0].Rows[0][0]; exp.IsNull() || exp.AsInt() >= now {
		return false, nil
	}
	stmts := []abi.SQLStatement{pdk.Q(pgsql.AttemptInterrupt, pk, eid, idx, now)}
	if idx < maxRetries {
		stmts = append(stmts, pdk.Q(pgsql.ExecCoreRetryAfterTimeout, pk, eid, now))
	} else {
		stmts = append(stmts, pdk.Q(pgsql.ExecCoreExpireAfterTimeout, pk, eid, now),
			pdk.Q(pgsql.CompletionInsert, pk, eid, model.OutcomeExpired, now, false))
	}
	stmts = append(stmts, pdk.Q(pgsql.LeaseEventInsert, eid, "expired", now, pk))
	_, err = pdk.Exec(s, stmts...)
	return err == nil, err
}
