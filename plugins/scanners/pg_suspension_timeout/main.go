// Command pg_suspension_timeout is the Postgres suspension-timeout
// reconciler as a fabric scanner plugin (upstream ff-backend-postgres
// reconcilers/suspension_timeout): per partition it lists suspensions
// whose timeout passed and handles each in its own transaction that
// re-reads the suspension under lock:
//
//	auto_resume_with_timeout_signal: member_map["__timeout__"] += timeout signal, timeout cleared
//	otherwise (fail by default, cancel, expire, escalate): execution terminal with
//	  cancellation_reason suspension_timeout_<behavior>, suspension row deleted,
//	  ff_completion_event 'cancelled' (cancel) or 'expired'
//
// Unlike upstream (spec §9 item 6), an execution that is no longer
// suspended (it resumed) is not terminated: its stale timeout is cleared.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{
	pgsql.SuspensionTimeoutScan, pgsql.SuspensionLock, pgsql.SuspensionAutoResume, pgsql.SuspensionClearTimeout,
	pgsql.ExecCoreTerminateSuspended, pgsql.SuspensionDelete, pgsql.CompletionInsert,
}

// Plugin is the reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_suspension_timeout", 2000, 1000, 10000, pgsql.Grants(Statements...), nil),
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
		Candidates: pdk.Q(pgsql.SuspensionTimeoutScan, pk, now, int64(req.BatchSize)),
		Handle:     func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) { return expire(s, pk, row[0].String(), now) },
		OnError:    func(_ []abi.SQLValue, err error) { h.Log(abi.LogWarn, "suspension timeout: "+err.Error()) },
	}.Run(h)
}

func expire(s pdk.SQLHost, pk int64, eid string, now int64) (bool, error) {
	rs, err := pdk.Exec(s, pdk.Q(pgsql.SuspensionLock, pk, eid))
	if err != nil || len(rs[0].Rows) == 0 {
		return false, err
	}
	r := rs[0].Rows[0]
	if r[0].IsNull() || r[0].AsInt() >= now {
		return false, nil
	}
	behavior, phase := r[1].String(), r[2].String()
	if behavior == "auto_resume_with_timeout_signal" {
		_, err = pdk.Exec(s, pdk.Q(pgsql.SuspensionAutoResume, pk, eid, now))
		return err == nil, err
	}
	if phase != model.PhaseSuspended {
		_, err = pdk.Exec(s, pdk.Q(pgsql.SuspensionClearTimeout, pk, eid))
		return false, err
	}
	outcome, reason := model.OutcomeExpired, "suspension_timeout_fail"
	switch behavior {
	case "cancel":
		outcome, reason = model.OutcomeCancelled, "suspension_timeout_cancel"
	case "expire", "escalate":
		reason = "suspension_timeout_" + behavior
	}
	_, err = pdk.Exec(s,
		pdk.Q(pgsql.ExecCoreTerminateSuspended, pk, eid, now, outcome, reason),
		pdk.Q(pgsql.SuspensionDelete, pk, eid),
		pdk.Q(pgsql.CompletionInsert, pk, eid, outcome, now, false))
	return err == nil, err
}
