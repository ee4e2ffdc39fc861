// Command suspension_timeout is the fabric scanner plugin that applies a
// suspension's timeout behaviour once it is due: it reads
// ff:idx:{fp:N}:suspension_timeout up to now, pre-reads
// current_waitpoint_id, current_attempt_index and lane_id of every due
// execution in one pipelined batch (FlowFabric: three HGETs per item), and
// runs ff_expire_suspension for each (engine spec §9.5: 2 s, 50 per
// partition).
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the suspension-timeout scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("suspension_timeout", 2000, 50,
		[]string{"ff_expire_suspension"}, []string{"ff:idx:*:suspension_timeout"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:suspension_timeout"}),
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	pk := model.KeysOn(req.Partition)
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{pk.SuspensionTimeout()} },
		PreRead: func(_, member string) []abi.ReadOp {
			return []abi.ReadOp{{Cmd: "HMGET", Key: model.KeysFor(model.ExecutionID(member)).Core(),
				Args: []string{"current_waitpoint_id", "current_attempt_index", "lane_id"}}}
		},
		Call: func(d pdk.Due) []abi.Call {
			p := fcall.ExpireSuspensionParams{ExecutionID: model.ExecutionID(d.Member),
				WaitpointID: pdk.FieldOr(d.Reads[0], 0, ""), AttemptIndex: pdk.AttemptIndexOf(pdk.FieldOr(d.Reads[0], 1, "0")),
				Lane: pdk.FieldOr(d.Reads[0], 2, "default")}
			return []abi.Call{pdk.CallOf(p.Call())}
		},
	}.Run(h, req)
}
