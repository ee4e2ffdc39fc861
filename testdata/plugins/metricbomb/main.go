// Command metricbomb reports, beside a good counter ("scans"), metrics
// the host must drop: a name that is not UTF-8, a 1 MiB name, a name
// with a space and a value that is not finite. /metrics must keep
// answering, with its good counter and every other plugin's series.
package main

import (
	"math"
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

var huge = strings.Repeat("m", 1<<20)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "metricbomb", Version: "1.0.0", IntervalMs: 1000, TimeoutMs: 30000},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			h.Metric(abi.Metric{Name: "scans", Value: 1})
			h.Metric(abi.Metric{Name: "bad\xff\xfe", Value: 1})
			h.Metric(abi.Metric{Name: huge, Value: 1})
			h.Metric(abi.Metric{Name: "with space", Value: 1})
			h.Metric(abi.Metric{Name: "nan", Kind: abi.MetricGauge, Value: math.NaN()})
			return abi.ScanResult{Scanned: 1}
		},
	})
}

func main() {}
