// Command flood floods the host with host calls (server time, as fast as
// it can) for up to 20 s a scan: its budget must stop it, with a refusal
// it sees (abi.CodeBudget), and the call must count as over budget.
package main

import (
	"errors"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "flood", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			start, _ := h.Now()
			var res abi.ScanResult
			for {
				now, err := h.Now()
				if errors.Is(err, abi.CodeBudget) {
					h.Log(abi.LogWarn, "flood refused: "+err.Error())
					res.Errors++
					return res
				}
				res.Scanned++
				if now-start > 20_000 {
					return res
				}
			}
		},
	})
}

func main() {}
