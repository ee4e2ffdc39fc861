// Command bench is a benchmark plugin: its scan makes BatchSize calls to
// the now host function, to measure the guest-to-host round trip.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "bench", Version: "1.0.0", IntervalMs: 1000, TimeoutMs: 10000, BatchSize: 1000},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			var res abi.ScanResult
			for range req.BatchSize {
				if _, err := h.Now(); err != nil {
					res.Errors++
				}
				res.Scanned++
			}
			return res
		},
	})
}

func main() {}
