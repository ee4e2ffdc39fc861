// Command panic is a broken test plugin: its scan panics.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "panicker", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			panic("boom from the panic fixture")
		},
	})
}

func main() {}
