// Command trap is a broken test plugin: its scan reads far outside linear
// memory, a wasm trap.
package main

import (
	"unsafe"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

var sink byte

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "trap", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			p := (*byte)(unsafe.Pointer(uintptr(0xFFFFFFF0)))
			sink = *p
			return abi.ScanResult{}
		},
	})
}

func main() {}
