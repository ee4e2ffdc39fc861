// Command slowhuge fills a 32 MiB output slowly (a pause after every MiB,
// some 3 s in all), then returns it: the host must refuse it from its size
// without copying it. It asks for 128 MiB: its 32 MiB in linear memory
// and the 32 MiB kernel block it copies them to count against one cap,
// and what it must meet is the output limit, not that cap.
package main

import (
	"time"

	"github.com/extism/go-pdk"

	"github.com/fabric-host/fabric/abi"
)

//go:wasmexport fabric_manifest
func manifest() int32 {
	m := abi.Manifest{ABI: abi.Version, Name: "slowhuge", Version: "1.0.0", Kind: abi.KindScanner, IntervalMs: 100, Family: "flow", BatchSize: 1, TimeoutMs: 30000, MaxPages: 2 * abi.DefaultMaxPages}
	b, _ := m.MarshalBinary()
	pdk.Output(b)
	return 0
}

//go:wasmexport fabric_scan
func scan() int32 {
	out := make([]byte, 32<<20)
	for i := 0; i < len(out); i += 4096 {
		out[i] = byte(i)
		if i%(1<<20) == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	pdk.Output(out)
	return 0
}

func main() {}
