// Command loop30 declares a 30 s timeout and spins forever: each call
// burns a core until it is cut, and each cut must count as a fault.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

var n int

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "loop30", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			for {
				n++
			}
		},
	})
}

func main() {}
