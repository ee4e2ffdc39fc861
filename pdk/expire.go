package pdk

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
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

// ExpireDue is ExpireScan's DueScan of partition req.Partition: members
// are executions of that partition (DueScan skips the rest), expired with
// fcall.ExpireExecutionParams.
func ExpireDue(req abi.ScanRequest, index, reason string) DueScan {
	return DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{index} },
		PreRead: func(_, member string) []abi.ReadOp {
			return []abi.ReadOp{{Cmd: "HMGET", Key: model.KeysFor(model.ExecutionID(member)).Core(), Args: []string{"lane_id", "current_attempt_index"}}}
		},
		Call: func(d Due) []abi.Call {
			p := fcall.ExpireExecutionParams{ExecutionID: model.ExecutionID(d.Member), Reason: reason,
				Lane: FieldOr(d.Reads[0], 0, "default"), AttemptIndex: AttemptIndexOf(FieldOr(d.Reads[0], 1, "0"))}
			return []abi.Call{CallOf(p.Call())}
		},
	}
}
