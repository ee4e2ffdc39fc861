// Command lease_expiry is the fabric scanner plugin that marks expired
// leases: it reads ff:idx:{fp:N}:lease_expiry up to now and runs
// ff_mark_lease_expired_if_due per due execution (FlowFabric's
// lease_expiry, engine spec §9.1: 1.5 s, 50 per partition).
//
// A marked execution stays in lease_expiry, as FlowFabric leaves it: that
// entry is how workers find work to reclaim (the SDK's reclaim pass reads
// the due heads of lease_expiry, ff_reclaim_execution re-scores it). Unlike
// FlowFabric, the scanner pre-reads every due member's core in one
// pipelined read and does not call ff_mark_lease_expired_if_due again for
// a lease already marked expired or revoked: such a member is skipped,
// not re-counted as processed every sweep, and up to 10 pages are read
// past such members, so a backlog awaiting reclaim does not starve newer
// expirations (FlowFabric re-marks the same 50 oldest entries forever).
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the lease-expiry scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("lease_expiry", 1500, 50,
		[]string{"ff_mark_lease_expired_if_due"}, []string{"ff:idx:*:lease_expiry"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:lease_expiry"}),
	Scan:      scan,
	ScanBatch: scanBatch,
}

func init() { pdk.Register(Plugin) }

func main() {}

// awaitingReclaim reports a core whose lease is already marked expired or
// revoked: nothing is left to detect until a worker reclaims it.
func awaitingReclaim(r abi.ReadResult) bool {
	if r.Err != "" || pdk.FieldOr(r, 0, "") != model.PhaseActive {
		return false
	}
	own := pdk.FieldOr(r, 1, "")
	return own == model.OwnershipLeaseExpiredReclaimable || own == model.OwnershipLeaseRevoked
}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	return dueScan(req).Run(h, req)
}

// scanBatch marks expired leases on the partitions of a batch call
// together.
func scanBatch(h pdk.Host, req abi.ScanBatchRequest) []abi.ScanResult {
	return pdk.DueBatch(h, req, dueScan)
}

// dueScan is the scanner's DueScan of one partition.
func dueScan(req abi.ScanRequest) pdk.DueScan {
	index := model.KeysOn(req.Partition).LeaseExpiry()
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{index} },
		Pages:   10,
		PreRead: func(_, member string) []abi.ReadOp {
			return []abi.ReadOp{{Cmd: "HMGET", Key: model.KeysFor(model.ExecutionID(member)).Core(),
				Args: []string{"lifecycle_phase", "ownership_state"}}}
		},
		Call: func(d pdk.Due) []abi.Call {
			if awaitingReclaim(d.Reads[0]) {
				return nil
			}
			p := fcall.MarkLeaseExpiredIfDueParams{ExecutionID: model.ExecutionID(d.Member)}
			return []abi.Call{pdk.CallOf(p.Call())}
		},
	}
}
