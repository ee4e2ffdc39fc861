// Command swap_v1 is version 1.0.0 of the "swapper" test plugin, for
// hot-swap tests.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "swapper", Version: "1.0.0", Kind: abi.KindScanner, IntervalMs: 100, Family: "flow", TimeoutMs: 30000},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			return abi.ScanResult{Scanned: 1}
		},
	})
}

func main() {}
