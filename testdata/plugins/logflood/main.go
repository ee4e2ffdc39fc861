// Command logflood logs 4 KiB lines as fast as it can: "lines" of them a
// call (config, default 2000). The host writes at most the plugin's log
// budget of them and notes how many it dropped. It keeps the gauge
// "attempted_bytes" of what it tried to log.
package main

import (
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

var line = strings.Repeat("flood ", 4096/6)

var attempted float64

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "logflood", Version: "1.0.0", IntervalMs: 1000, TimeoutMs: 30000,
			Config: map[string]string{"lines": "2000"}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			n := 2000
			if v, ok := h.Config("lines"); ok {
				if i, err := strconv.Atoi(v); err == nil && i > 0 {
					n = i
				}
			}
			for range n {
				h.Log(abi.LogInfo, line)
			}
			attempted += float64(n * len(line))
			h.Metric(abi.Metric{Name: "attempted_bytes", Kind: abi.MetricGauge, Value: attempted})
			return abi.ScanResult{Scanned: 1}
		},
	})
}

func main() {}
