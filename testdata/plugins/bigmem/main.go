// Command bigmem asks for 1 GiB of memory (max_pages 16384) and allocates
// until it dies: the operator's ceiling, not the manifest, bounds what it
// costs the host.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

var hoard [][]byte

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "bigmem", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000, MaxPages: abi.MaxMaxPages},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			for {
				b := make([]byte, 4<<20)
				for i := 0; i < len(b); i += 4096 {
					b[i] = 1 // touch every page
				}
				hoard = append(hoard, b)
			}
		},
	})
}

func main() {}
