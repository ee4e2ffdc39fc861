// Command plugerr is version 0.9.0 of the "swapper" test plugin, broken
// on purpose: every scan returns an error of its own (a non-zero status
// with a message), which the host must label "plugin error", not "trap".
// Writing swap_v1 over it is the fix.
package main

import (
	"github.com/extism/go-pdk"

	"github.com/fabric-host/fabric/abi"
)

//go:wasmexport fabric_manifest
func manifest() int32 {
	m := abi.Manifest{ABI: abi.Version, Name: "swapper", Version: "0.9.0", Kind: abi.KindScanner, IntervalMs: 100, Family: "flow", BatchSize: 1, TimeoutMs: 30000, MaxPages: abi.DefaultMaxPages}
	b, _ := m.MarshalBinary()
	pdk.Output(b)
	return 0
}

//go:wasmexport fabric_scan
func scan() int32 {
	pdk.SetErrorString("swapper 0.9.0 cannot scan: misconfigured on purpose")
	return 1
}

func main() {}
