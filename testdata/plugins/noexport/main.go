// Command noexport is a broken test plugin, built on go-pdk directly: it
// has fabric_manifest but no fabric_scan export.
package main

import (
	"github.com/extism/go-pdk"

	"github.com/fabric-host/fabric/abi"
)

//go:wasmexport fabric_manifest
func manifest() int32 {
	m := abi.Manifest{ABI: abi.Version, Name: "noexport", Version: "1.0.0"}
	b, _ := m.MarshalBinary()
	pdk.Output(b)
	return 0
}

func main() {}
