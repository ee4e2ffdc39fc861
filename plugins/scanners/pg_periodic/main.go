// Command pg_periodic fires Postgres periodic schedules (fixed intervals
// and cron expressions, written by the SDK's Client.AddPeriodic into
// fabric's fabric_periodic table): per partition it lists the schedules
// due now (periodic.due_scan) and, for each, fires its due ticks in one
// transaction (periodic.fire per tick): the tick's execution is created
// through the catalog's one execution INSERT (model/pgsql, the same as
// the SDK's create) and the schedule moves to its next tick.
//
// Exactly once per tick across hosts: periodic.fire is a compare-and-set
// on the schedule row (next_due_ms = tick), so a second host firing the
// same tick waits for the first one's row lock, then finds the schedule
// moved and creates nothing; the tick's execution id is derived from the
// schedule name and the tick (periodic.TickID), so even a replayed create
// lands on the same row (ON CONFLICT DO NOTHING).
//
// Late ticks (a slow host) fire one by one; ticks missed by more than
// periodic.CatchUp are skipped (periodic.Timing.After), as on Valkey.
//
// Configuration: none.
package main

import (
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// Statements is what the plugin runs (its capabilities.sql grant).
var Statements = []pgsql.Statement{pgsql.PeriodicDueScan, pgsql.PeriodicFire, pgsql.PeriodicNextDue}

// Plugin is the periodic scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.SQLScanner("pg_periodic", 500, 100, 10000, pgsql.Grants(Statements...), nil),
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
	part := model.Partition{Family: model.FamilyFlow, Index: req.Partition.Index}
	res := pdk.RowScan{
		Candidates: pdk.Q(pgsql.PeriodicDueScan, pk, now, int64(req.BatchSize)),
		Handle: func(s pdk.SQLHost, row []abi.SQLValue) (bool, error) {
			name, tick := row[0].String(), row[1].AsInt()
			var every time.Duration
			if !row[2].IsNull() {
				every = time.Duration(row[2].AsInt()) * time.Millisecond
			}
			timing, err := periodic.ParseTiming(every, row[4].AsInt(), row[3].String())
			if err != nil {
				return false, err
			}
			fired := false
			for _, st := range timing.Steps(tick, now) {
				eid := periodic.TickID(part, name, st.Tick)
				rs, err := pdk.Exec(s, pdk.Q(pgsql.PeriodicFire, pk, name, st.Tick, st.Next, eid.UUIDString(), now))
				if err != nil {
					return false, err
				}
				if len(rs[0].Rows) != 1 || rs[0].Rows[0][0].AsInt() == 0 {
					break // another host fired it (or it was removed)
				}
				fired = true
			}
			return fired, nil
		},
		OnError: func(_ []abi.SQLValue, err error) { h.Log(abi.LogWarn, "periodic: "+err.Error()) },
	}.Run(h)
	// Report the partition's next tick so the host can wake it on time.
	if s, err := pdk.SQLOf(h); err == nil {
		if rs, err := pdk.Exec(s, pdk.Q(pgsql.PeriodicNextDue, pk)); err == nil && len(rs[0].Rows) == 1 && !rs[0].Rows[0][0].IsNull() {
			if n := rs[0].Rows[0][0].AsInt(); n > now {
				res.NextDueMs = n
			}
		}
	}
	return res
}
