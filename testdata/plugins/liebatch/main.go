// Command liebatch is a hostile test plugin with the default grant: its
// scan sends the read_batch host function a request whose op count
// equals the bytes that follow it (16 MiB of zeros; an op takes at least
// three bytes). A host that allocates for the count before checking it
// takes ~56 bytes per op claimed (~900 MB); this host must refuse the
// request as malformed and fault the plugin (bad output).
package main

import (
	"encoding/binary"

	"github.com/extism/go-pdk"

	"github.com/fabric-host/fabric/abi"
	fpdk "github.com/fabric-host/fabric/pdk"
)

//go:wasmimport fabric:host/v1 read_batch
func hostReadBatch(req uint64) uint64

// lie is the op count claimed, and the bytes that follow it.
const lie = 16 << 20

// tagBatchReadReq is abi's read_batch request tag.
const tagBatchReadReq = 0xBE

func init() {
	fpdk.Register(fpdk.Plugin{
		Manifest: abi.Manifest{Name: "liebatch", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000},
		Scan: func(h fpdk.Host, req abi.ScanRequest) abi.ScanResult {
			b := binary.AppendUvarint([]byte{tagBatchReadReq}, lie)
			b = append(b, make([]byte, lie)...)
			in := pdk.AllocateBytes(b)
			out := pdk.FindMemory(hostReadBatch(abi.SizedPtr(in.Offset(), len(b))))
			// Reached only when the host answers the lie instead of
			// faulting the call.
			_, err := abi.OpenEnvelope(out.ReadBytes())
			h.Log(abi.LogWarn, "liebatch: the host answered the lie")
			if err != nil {
				h.Log(abi.LogWarn, "liebatch: "+err.Error())
			}
			return abi.ScanResult{Errors: 1}
		},
	})
}

func main() {}
