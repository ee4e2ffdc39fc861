// Command badoutput is a broken test plugin, built on go-pdk directly:
// its fabric_scan returns bytes that are not a ScanResult.
package main

import (
	"github.com/extism/go-pdk"

	"github.com/fabric-host/fabric/abi"
)

//go:wasmexport fabric_manifest
func manifest() int32 {
	m := abi.Manifest{ABI: abi.Version, Name: "badoutput", Version: "1.0.0", Kind: abi.KindScanner, IntervalMs: 100, Family: "flow", BatchSize: 1, TimeoutMs: 30000, MaxPages: abi.DefaultMaxPages}
	b, _ := m.MarshalBinary()
	pdk.Output(b)
	return 0
}

//go:wasmexport fabric_scan
func scan() int32 {
	pdk.Output([]byte("\xde\xad\xbe\xef not a scan result"))
	return 0
}

func main() {}
