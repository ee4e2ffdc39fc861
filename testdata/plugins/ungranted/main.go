// Command ungranted is a test plugin that calls what it was not granted:
// an FCALL outside capabilities.fcall, a read outside capabilities.read,
// and a granted read of the next partition's key (refused as cross
// partition, also when both partitions are in one fabric_scan_batch
// call). It logs the refusal it is told.
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
			next := model.Partition{Family: req.Partition.Family, Index: (req.Partition.Index + 1) % req.Partitions}
			if _, err := h.ZRangeByScore(abi.ZRangeRequest{Key: model.KeysOn(next).LaneDelayed("default"), Min: "-inf", Max: "+inf", Count: 1}); err != nil {
				h.Log(abi.LogWarn, "cross-partition read refused: "+err.Error())
				res.Errors++
			}
			return res
		},
	})
}

func main() {}
