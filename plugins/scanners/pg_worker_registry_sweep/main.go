// Command pg_worker_registry_sweep removes lapsed Postgres worker
// registrations (upstream ff-backend-postgres worker_registry
// ttl_sweep_tick, run every 30 s): ff_worker_registry rows whose
// last_heartbeat_ms + liveness_ttl_ms is before now are deleted and a
// 'ttl_swept' ff_worker_registry_event appended for each, one statement
// per registry partition.
//
// The registry has its own 256 partitions (FNV-1a of the instance id);
// the call for flow partition i sweeps the registry partitions p with
// p % flow partition count = i, all in one transaction.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{pgsql.WorkerRegistrySweep}

// Plugin is the sweeper, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_worker_registry_sweep", 30000, 1, 10000, pgsql.Grants(Statements...), nil),
	Scan:     scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	var res abi.ScanResult
	now, err := h.Now()
	if err != nil {
		res.Errors++
		return res
	}
	s, err := pdk.SQLOf(h)
	if err != nil {
		res.Errors++
		return res
	}
	count := int(req.Partitions)
	if count <= 0 {
		count = 1
	}
	var stmts []abi.SQLStatement
	for p := int(req.Partition.Index); p < pgsql.WorkerRegistryPartitions; p += count {
		stmts = append(stmts, pdk.Q(pgsql.WorkerRegistrySweep, p, now))
	}
	if len(stmts) == 0 {
		return res
	}
	rs, err := pdk.Exec(s, stmts...)
	if err != nil {
		h.Log(abi.LogWarn, "worker registry sweep: "+err.Error())
		res.Errors++
		return res
	}
	res.Scanned = uint32(len(stmts))
	for _, r := range rs {
		if len(r.Rows) == 1 {
			res.Acted += uint32(r.Rows[0][0].AsInt())
		}
	}
	return res
}
