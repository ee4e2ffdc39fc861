// Command legacyptr is a test plugin that speaks ABI 1.1: it calls the
// zrangebyscore host function itself with an unsized kernel pointer, as
// plugins built before sized pointers (ABI 1.2) do, and reads the unsized
// result back by asking the kernel for its length. It reports the members
// it read as Scanned.
//
// With config "lie" = "1" it is hostile instead: it sends a sized pointer
// whose length runs past the end of kernel memory, which the host must
// treat as an ABI violation (a fault of this plugin only).
package main

import (
	"github.com/extism/go-pdk"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	fpdk "github.com/fabric-host/fabric/pdk"
)

//go:wasmimport fabric:host/v1 zrangebyscore
func hostZRangeByScore(req uint64) uint64

func init() {
	fpdk.Register(fpdk.Plugin{
		Manifest: abi.Manifest{Name: "legacyptr", Version: "1.0.0", ABI: "1.1.0", IntervalMs: 100, TimeoutMs: 30000,
			Family: "flow", Capabilities: abi.Capabilities{Read: []string{"ff:idx:*:lane:*:delayed"}}},
		Scan: func(h fpdk.Host, req abi.ScanRequest) abi.ScanResult {
			zr := abi.ZRangeRequest{Key: model.KeysOn(req.Partition).LaneDelayed("default"), Min: "-inf", Max: "+inf", Count: 100}
			b, _ := zr.MarshalBinary()
			in := pdk.AllocateBytes(b)
			ptr := in.Offset()
			if v, _ := h.Config("lie"); v == "1" {
				ptr = abi.SizedPtr(ptr, 0x7fff_0000)
			}
			out := pdk.FindMemory(hostZRangeByScore(ptr))
			body, err := abi.OpenEnvelope(out.ReadBytes())
			if err != nil {
				h.Log(abi.LogWarn, "zrangebyscore: "+err.Error())
				return abi.ScanResult{Errors: 1}
			}
			var m abi.Members
			if err := m.UnmarshalBinary(body); err != nil {
				return abi.ScanResult{Errors: 1}
			}
			return abi.ScanResult{Scanned: uint32(len(m.Members))}
		},
	})
}

func main() {}
