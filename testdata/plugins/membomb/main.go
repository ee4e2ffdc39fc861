// Command membomb is a broken test plugin: its scan allocates until it
// hits its 16 MiB memory cap.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

var hoard [][]byte

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "membomb", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000, MaxPages: 256},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			for {
				b := make([]byte, 1<<20)
				b[0] = 1
				hoard = append(hoard, b)
			}
		},
	})
}

func main() {}
