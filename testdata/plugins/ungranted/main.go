// Command ungranted is a test plugin that calls what it was not granted:
// an FCALL outside capabilities.fcall, and a read outside
// capabilities.read. It logs the refusal it is told.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "ungranted", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000,
			Capabilities: abi.Capabilities{FCall: []string{"ff_version"}, Read: []string{"ff:idx:*:lane:*:delayed"}}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			var res abi.ScanResult
			keys := model.KeysOn(req.Partition)
			if _, err := h.FCall([]abi.Call{{Function: "ff_promote_delayed", Keys: []string{keys.LaneDelayed("default")}}}); err != nil {
				h.Log(abi.LogWarn, "fcall refused: "+err.Error())
				res.Errors++
			}
			if _, err := h.SMembers(keys.AllExecutions()); err != nil {
				h.Log(abi.LogWarn, "read refused: "+err.Error())
				res.Errors++
			}
			return res
		},
	})
}

func main() {}
