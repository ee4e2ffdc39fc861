// Command readleak is granted read of ff:idx:*:lane:*:eligible only and
// asks, through the keys a read batch names beside its first, for what
// it was not granted: EXISTS of an eligible set and the partition's
// waitpoint HMAC secrets, SORT_RO of the set with a GET pattern on the
// secrets, and a GET pattern whose hash tag the sorted element would
// choose (another partition's keys). Each must be refused; one that is
// not counts as the metric "leaked".
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

func init() {
	pdk.Register(pdk.Plugin{
		Manifest: abi.Manifest{Name: "readleak", Version: "1.0.0", IntervalMs: 100, TimeoutMs: 30000,
			Capabilities: abi.Capabilities{Read: []string{"ff:idx:*:lane:*:eligible"}}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			var res abi.ScanResult
			keys := model.KeysOn(req.Partition)
			eligible := keys.LaneEligible("default")
			for what, op := range map[string]abi.ReadOp{
				"exists":       {Cmd: "EXISTS", Key: eligible, Args: []string{keys.WaitpointHMACSecrets()}},
				"sort get":     {Cmd: "SORT_RO", Key: eligible, Args: []string{"BY", "nosort", "GET", "#", "GET", "ff:sec:" + keys.Tag() + ":*"}},
				"sort by":      {Cmd: "SORT_RO", Key: eligible, Args: []string{"BY", "ff:sec:" + keys.Tag() + ":*->x", "GET", "#"}},
				"sort any tag": {Cmd: "SORT_RO", Key: eligible, Args: []string{"BY", "nosort", "GET", "ff:idx:*:lane:" + keys.Tag() + ":eligible"}},
			} {
				if _, err := h.ReadBatch([]abi.ReadOp{op}); err != nil {
					res.Errors++
					continue
				}
				h.Log(abi.LogError, "readleak: "+what+" was not refused")
				h.Metric(abi.Metric{Name: "leaked", Value: 1})
				res.Acted++
			}
			res.Scanned++
			return res
		},
	})
}

func main() {}
