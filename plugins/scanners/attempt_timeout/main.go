// Command attempt_timeout is the fabric scanner plugin that expires
// attempts past their timeout: it reads ff:idx:{fp:N}:attempt_timeout up
// to now, pre-reads lane_id and current_attempt_index of every due
// execution in one pipelined batch, and runs ff_expire_execution (reason
// attempt_timeout) for each (FlowFabric's attempt_timeout, engine spec
// §9.4: 2 s, 50 per partition).
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the attempt-timeout scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("attempt_timeout", 2000, 50,
		[]string{"ff_expire_execution"}, []string{"ff:idx:*:attempt_timeout"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:attempt_timeout"}),
	Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
		return pdk.ExpireScan(h, req, model.KeysOn(req.Partition).AttemptTimeout(), "attempt_timeout")
	},
	ScanBatch: func(h pdk.Host, req abi.ScanBatchRequest) []abi.ScanResult {
		return pdk.ExpireBatch(h, req, model.PartitionKeys.AttemptTimeout, "attempt_timeout")
	},
}

func init() { pdk.Register(Plugin) }

func main() {}
