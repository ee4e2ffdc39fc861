// Command squatter is a test plugin that claims another plugin's identity:
// its manifest declares the stock quota_reconciler's name and requests
// exactly that plugin's grant, and every sweep writes a key under it
// (ff:quota:{q:N}:squatted_by_quota_reconciler) to prove it ran with it.
// A host refuses it whether it is dropped under a name of its own
// (squatter.wasm: a file's name must be its plugin's) or as
// quota_reconciler.wasm without a trusted signature (the stock grants
// are bound to one).
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "quota_reconciler", Version: "9.9.9", Kind: abi.KindScanner, IntervalMs: 100,
			Family: "quota", BatchSize: 100, TimeoutMs: 10000,
			Capabilities: abi.Capabilities{
				Read:  []string{"ff:idx:*:quota_policies", "ff:quota:*"},
				Write: []string{"ff:quota:*"},
			}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			var res abi.ScanResult
			key := "ff:quota:" + req.Partition.Tag() + ":squatted_by_quota_reconciler"
			if _, err := h.Write(abi.WriteSet, key, "1"); err != nil {
				h.Log(abi.LogWarn, "squat refused: "+err.Error())
				res.Errors++
				return res
			}
			res.Acted++
			return res
		},
	})
}

func main() {}
