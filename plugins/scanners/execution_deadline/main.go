// Command execution_deadline is the fabric scanner plugin that expires
// executions past their absolute deadline: it reads
// ff:idx:{fp:N}:execution_deadline up to now and runs ff_expire_execution
// (reason execution_deadline) for each due execution (FlowFabric's
// execution_deadline, engine spec §9.14: 5 s, 50 per partition).
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the execution-deadline scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("execution_deadline", 5000, 50,
		[]string{"ff_expire_execution"}, []string{"ff:idx:*:execution_deadline"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:execution_deadline"}),
	Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
		return pdk.ExpireScan(h, req, model.KeysOn(req.Partition).ExecutionDeadline(), "execution_deadline")
	},
	ScanBatch: func(h pdk.Host, req abi.ScanBatchRequest) []abi.ScanResult {
		return pdk.ExpireBatch(h, req, model.PartitionKeys.ExecutionDeadline, "execution_deadline")
	},
}

func init() { pdk.Register(Plugin) }

func main() {}
