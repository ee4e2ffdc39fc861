// Command healthy is a well-behaved test plugin: every call reads the
// clock, bumps a metric and reports one scanned item.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "healthy", Version: "1.0.0", Kind: abi.KindScanner, IntervalMs: 100, Family: "flow", TimeoutMs: 30000},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			if _, err := h.Now(); err != nil {
				return abi.ScanResult{Errors: 1}
			}
			h.Metric(abi.Metric{Name: "scans", Value: 1})
			return abi.ScanResult{Scanned: 1}
		},
	})
}

func main() {}
