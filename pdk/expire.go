package pdk

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

// ExpireScan is the shared scan of attempt_timeout and execution_deadline
// (engine spec §9.4, §9.14): for each due execution of index, pre-read
// lane_id and current_attempt_index, then ff_expire_execution with reason.
func ExpireScan(h Host, req abi.ScanRequest, index, reason string) abi.ScanResult {
	return ExpireDue(req, index, reason).Run(h, req)
}

// ExpireBatch is ExpireScan over the partitions of a fabric_scan_batch
// call together (see DueBatch); index names a partition's index.
func ExpireBatch(h Host, req abi.ScanBatchRequest, index func(model.PartitionKeys) string, reason string) []abi.ScanResult {
	return DueBatch(h, req, func(r abi.ScanRequest) DueScan {
		return ExpireDue(r, index(model.KeysOn(r.Partition)), reason)
	})
}

// ExpireDue is ExpireScan's DueScan of partition req.Partition.
func ExpireDue(req abi.ScanRequest, index, reason string) DueScan {
	pk := model.KeysOn(req.Partition)
	return DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{index} },
		PreRead: func(_, member string) []abi.ReadOp {
			return []abi.ReadOp{{Cmd: "HMGET", Key: model.KeysFor(model.ExecutionID(member)).Core(), Args: []string{"lane_id", "current_attempt_index"}}}
		},
		Call: func(d Due) []abi.Call {
			lane := FieldOr(d.Reads[0], 0, "default")
			att := FieldOr(d.Reads[0], 1, "0")
			return []abi.Call{ExpireExecutionCall(pk, model.ExecutionID(d.Member), lane, att, reason)}
		},
	}
}

// ExpireExecutionCall builds FlowFabric's 14-KEY ff_expire_execution for
// eid on lane with attempt index att (a string, used verbatim). KEYS[7] is
// the worker-leases key of the empty worker id, as FlowFabric sends it (the
// function derives the real one from exec core).
func ExpireExecutionCall(pk model.PartitionKeys, eid model.ExecutionID, lane, att, reason string) abi.Call {
	k := model.KeysFor(eid)
	tag := pk.Tag()
	return abi.Call{
		Function: "ff_expire_execution",
		Keys: []string{
			k.Core(),
			"ff:attempt:" + tag + ":" + string(eid) + ":" + att,
			"ff:stream:" + tag + ":" + string(eid) + ":" + att + ":meta",
			k.LeaseCurrent(), k.LeaseHistory(), pk.LeaseExpiry(), pk.WorkerLeases(""),
			pk.LaneActive(lane), pk.LaneTerminal(lane), pk.AttemptTimeout(), pk.ExecutionDeadline(),
			pk.LaneSuspended(lane), pk.SuspensionTimeout(), k.SuspensionCurrent(),
		},
		Args: []string{string(eid), reason},
	}
}
