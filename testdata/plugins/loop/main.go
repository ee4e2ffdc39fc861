// Command loop is a broken test plugin: its scan never returns.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

var n int

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "looper", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 200},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			for {
				n++
			}
		},
	})
}

func main() {}
