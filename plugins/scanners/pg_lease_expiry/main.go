// Command pg_lease_expiry is the Postgres lease-expiry reconciler as a
// fabric scanner plugin (upstream ff-backend-postgres
// reconcilers/lease_expiry): per partition, it lists attempts whose lease
// ran out and marks each expired in its own transaction that re-reads the
// attempt under lock:
//
//	attempt: lease cleared, outcome lease_expired_reclaimable
//	execution (only while active and leased on that attempt): active /
//	  lease_expired_reclaimable / waiting_for_worker / attempt_interrupted,
//	  raw_fields.lease_expired_at; a worker of its lane then reclaims it with
//	  a new "reclaim" attempt, as ff_mark_lease_expired_if_due leaves it on
//	  Valkey (upstream made it runnable on the same attempt)
//	ff_lease_event 'expired'; no completion event
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{
	pgsql.LeaseExpiryScan, pgsql.AttemptLockLease, pgsql.AttemptReleaseExpired,
	pgsql.ExecCoreMarkExpired, pgsql.LeaseEventInsert,
}

// Plugin is the reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_lease_expiry", 1500, 1000, 10000, pgsql.Grants(Statements...), nil),
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
		Candidates: pdk.Q(pgsql.LeaseExpiryScan, pk, now, int64(req.BatchSize)),
		Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
			return release(s, pk, row[0].String(), row[1].AsInt(), now)
		},
		OnError: func(_ []abi.SQLValue, err error) { h.Log(abi.LogWarn, "lease expiry: "+err.Error()) },
	}.Run(h)
}

// release is the per-row transaction body (upstream release_one, marking
// instead of releasing).
func release(s pdk.SQLHost, pk int64, eid string, idx, now int64) (bool, error) {
	rs, err := pdk.Exec(s, pdk.Q(pgsql.AttemptLockLease, pk, eid, idx))
	if err != nil || len(rs[0].Rows) == 0 {
		return false, err
	}
	if exp := rs[0].Rows[0][0]; exp.IsNull() || exp.AsInt() >= now {
		return false, nil
	}
	_, err = pdk.Exec(s,
		pdk.Q(pgsql.AttemptReleaseExpired, pk, eid, idx),
		pdk.Q(pgsql.ExecCoreMarkExpired, pk, eid, now, idx),
		pdk.Q(pgsql.LeaseEventInsert, eid, "expired", now, pk))
	return err == nil, err
}
