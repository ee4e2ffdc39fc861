// Command slowpart is a test plugin whose call on one partition lasts a
// while: config slow_partition (default 200) names the flow partition,
// slow_ms (default 3000) how long its call lasts, by the server's clock
// read every few milliseconds. Every other call returns at once. Tests use
// it to hold a call in flight while a partition changes hands.
package main

import (
	"strconv"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

func configInt(h pdk.Host, key string, def int64) int64 {
	if v, ok := h.Config(key); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "slowpart", Version: "1.0.0", Kind: abi.KindScanner, IntervalMs: 100, Family: "flow", TimeoutMs: 30000,
			Config: map[string]string{"slow_partition": "200", "slow_ms": "3000"}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			if int64(req.Partition.Index) != configInt(h, "slow_partition", 200) {
				return abi.ScanResult{Scanned: 1}
			}
			start, err := h.Now()
			if err != nil {
				return abi.ScanResult{Errors: 1}
			}
			until := start + configInt(h, "slow_ms", 3000)
			for {
				now, err := h.Now()
				if err != nil {
					return abi.ScanResult{Errors: 1}
				}
				if now >= until {
					return abi.ScanResult{Scanned: 1, Acted: 1}
				}
				time.Sleep(5 * time.Millisecond)
			}
		},
	})
}

func main() {}
