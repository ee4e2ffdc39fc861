// Command kernelbomb is a hostile test plugin: its scan holds 32 MiB of
// its linear memory, then allocates 1 MiB Extism kernel blocks (memory
// the host keeps for it, host-side) until the host stops it, logging the
// MiB it holds after each. Under its 64 MiB cap the blocks and the linear
// memory together must stay within 64 MiB: the call ends over memory
// with at most 32 MiB of blocks.
package main

import (
	"strconv"

	"github.com/extism/go-pdk"

	"github.com/fabric-host/fabric/abi"
	fpdk "github.com/fabric-host/fabric/pdk"
)

// HoardMiB is the linear memory the scan holds before allocating blocks.
const HoardMiB = 32

var hoard [][]byte

func init() {
	fpdk.Register(fpdk.Plugin{
		Manifest: abi.Manifest{Name: "kernelbomb", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000, MaxPages: abi.DefaultMaxPages},
		Scan: func(h fpdk.Host, req abi.ScanRequest) abi.ScanResult {
			for len(hoard) < HoardMiB {
				b := make([]byte, 1<<20)
				for i := 0; i < len(b); i += 4096 {
					b[i] = 1
				}
				hoard = append(hoard, b)
			}
			for n := 1; ; n++ {
				if m := pdk.Allocate(1 << 20); m.Offset() == 0 {
					h.Log(abi.LogWarn, "kernelbomb: alloc returned 0")
					return abi.ScanResult{Errors: 1}
				}
				h.Log(abi.LogInfo, "kernelbomb: holding "+strconv.Itoa(HoardMiB)+" MiB linear, "+strconv.Itoa(n)+" MiB blocks")
			}
		},
	})
}

func main() {}
