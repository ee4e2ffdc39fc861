// Command sqltrap is a broken test plugin for the sql_query rollback
// guarantee: inside its own transaction it runs the attempt-timeout
// writes on every timed-out attempt of the partition (expiring it and
// emitting a completion event), then, by config "mode", traps (a wasm
// trap: read far outside linear memory), loops until the host kills the
// call at its deadline ("loop"), or returns without committing
// ("forget"). In every mode the host must roll the writes back.
package main

import (
	"unsafe"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

var sink byte

var stmts = []pgsql.Statement{
	pgsql.AttemptTimeoutScan, pgsql.AttemptInterrupt, pgsql.ExecCoreExpireAfterTimeout,
	pgsql.CompletionInsert, pgsql.LeaseEventInsert,
}

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "sqltrap", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000,
			Config:       map[string]string{"mode": "trap"},
			Capabilities: abi.Capabilities{SQL: pgsql.Grants(stmts...)}},
		Scan: scan,
	})
}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	s, err := pdk.SQLOf(h)
	if err != nil {
		return abi.ScanResult{Errors: 1}
	}
	now, _ := h.Now()
	pk := int64(req.Partition.Index)
	rs, err := pdk.Exec(s, pdk.Q(pgsql.AttemptTimeoutScan, pk, now, int64(100)))
	if err != nil || len(rs[0].Rows) == 0 {
		return abi.ScanResult{}
	}
	if _, err := s.SQL(abi.SQLRequest{Op: abi.SQLBegin}); err != nil {
		return abi.ScanResult{Errors: 1}
	}
	for _, row := range rs[0].Rows {
		eid, idx := row[0].String(), row[1].AsInt()
		if _, err := pdk.Exec(s,
			pdk.Q(pgsql.AttemptInterrupt, pk, eid, idx, now),
			pdk.Q(pgsql.ExecCoreExpireAfterTimeout, pk, eid, now),
			pdk.Q(pgsql.CompletionInsert, pk, eid, "expired", now, false),
			pdk.Q(pgsql.LeaseEventInsert, eid, "expired", now, pk)); err != nil {
			return abi.ScanResult{Errors: 1}
		}
	}
	mode, _ := h.Config("mode")
	switch mode {
	case "loop":
		for {
			sink++
		}
	case "forget":
		return abi.ScanResult{Scanned: uint32(len(rs[0].Rows)), Acted: uint32(len(rs[0].Rows))}
	}
	p := (*byte)(unsafe.Pointer(uintptr(0xFFFFFFF0)))
	sink = *p
	return abi.ScanResult{}
}

func main() {}
