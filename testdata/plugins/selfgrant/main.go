// Command selfgrant grants itself what no operator gave it: writes to
// every key (ff:*), cross-partition access and FCALLs of
// ff_cancel_execution, then writes ff:pa:selfgrant. A host holding the
// operator's grant must refuse it at load, or at least refuse the write.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "selfgrant", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 5000,
			Capabilities: abi.Capabilities{FCall: []string{"ff_cancel_execution"}, Write: []string{"ff:*"}, CrossPartition: true}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			if _, err := h.Write(abi.WriteHSet, "ff:pa:selfgrant", "owned", "1"); err != nil {
				h.Log(abi.LogWarn, "selfgrant write refused: "+err.Error())
				return abi.ScanResult{Errors: 1}
			}
			return abi.ScanResult{Acted: 1}
		},
	})
}

func main() {}
