// Command pending_wp_expiry is the fabric scanner plugin that closes
// pending waitpoints never committed by a suspension: it reads
// ff:idx:{fp:N}:pending_waitpoint_expiry up to now, pre-reads each
// waitpoint's execution_id and state in one pipelined batch, and runs
// ff_close_waitpoint (reason never_committed) for each (FlowFabric's
// pending_wp_expiry, engine spec §9.6: 5 s, 100 per partition; failure
// tracker keyed by waitpoint id).
//
// Unlike FlowFabric, an entry whose waitpoint hash is gone or already
// closed/expired is dropped with fabric_clear_pending_waitpoint
// (ff_close_waitpoint leaves it, so it is re-called and re-counted every
// sweep), and a waitpoint without an execution_id is skipped (FlowFabric
// HEAD) rather than closed through ff:exec:<tag>::core.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the pending-waitpoint expiry scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("pending_wp_expiry", 5000, 100,
		[]string{"ff_close_waitpoint", "fabric_clear_pending_waitpoint"},
		[]string{"ff:idx:*:pending_waitpoint_expiry", "ff:wp:*"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:pending_waitpoint_expiry"}),
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	pk := model.KeysOn(req.Partition)
	index := pk.PendingWaitpointExpiry()
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{index} },
		PreRead: func(_, wp string) []abi.ReadOp {
			return []abi.ReadOp{{Cmd: "HMGET", Key: pk.Waitpoint(wp), Args: []string{"execution_id", "state"}}}
		},
		Subject: func(d pdk.Due) string { return pdk.FieldOr(d.Reads[0], 0, "") },
		Call: func(d pdk.Due) []abi.Call {
			r := d.Reads[0]
			if r.Err != "" {
				return nil
			}
			state := pdk.FieldOr(r, 1, "")
			if state == "" || state == "closed" || state == "expired" {
				// KEYS: waitpoint hash, pending index; ARGV: waitpoint id.
				return []abi.Call{{Function: "fabric_clear_pending_waitpoint", Keys: []string{pk.Waitpoint(d.Member), index}, Args: []string{d.Member}}}
			}
			eid := pdk.FieldOr(r, 0, "")
			if !pdk.OnPartition(eid, req.Partition) {
				return nil
			}
			p := fcall.CloseWaitpointParams{ExecutionID: model.ExecutionID(eid), WaitpointID: d.Member, Reason: "never_committed"}
			return []abi.Call{pdk.CallOf(p.Call())}
		},
	}.Run(h, req)
}
