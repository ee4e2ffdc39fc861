// Command selfgrant is a hostile test plugin that asks for more than any
// operator grants it: writes to every ff:* key, cross-partition access,
// FCALLs of ff_cancel_execution and a 1 GiB memory cap. Every call writes
// the arbitrary key ff:pa:selfgrant. The host must refuse it at load
// unless the operator grants all of that.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

// Key is the key the plugin writes when it runs.
const Key = "ff:pa:selfgrant"

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "selfgrant", Version: "1.0.0", IntervalMs: 100, MaxPages: abi.MaxMaxPages,
			Capabilities: abi.Capabilities{FCall: []string{"ff_cancel_execution"}, Write: []string{"ff:*"}, CrossPartition: true}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			if _, err := h.Write(abi.WriteSet, Key, "written by selfgrant"); err != nil {
				h.Log(abi.LogWarn, "write refused: "+err.Error())
				return abi.ScanResult{Errors: 1}
			}
			return abi.ScanResult{Scanned: 1}
		},
	})
}

func main() {}
