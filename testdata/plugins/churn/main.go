// Command churn is a well-behaved test plugin that allocates a lot of
// short-lived memory in one call: each scan makes 192 MiB of garbage in
// 64 KiB slices between host calls, under a 16 MiB memory cap. Inside one
// call Go's collector does not keep up by itself; the pdk collects at
// host calls, so the plugin keeps running.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

var sink []byte

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "churn", Version: "1.0.0", Kind: abi.KindScanner, IntervalMs: 200, Family: "flow",
			TimeoutMs: 30000, MaxPages: 256, Capabilities: abi.Capabilities{Read: []string{"ff:idx:*:all_executions"}}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			var res abi.ScanResult
			for i := range 3072 {
				b := make([]byte, 64<<10)
				b[len(b)-1] = byte(i)
				sink = b
				if i%8 == 0 {
					if _, err := h.SMembers(model.KeysOn(req.Partition).AllExecutions()); err != nil {
						res.Errors++
					}
				}
			}
			res.Scanned = 1
			return res
		},
	})
}

func main() {}
