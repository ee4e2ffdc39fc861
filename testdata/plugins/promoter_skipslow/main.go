// Command promoter_skipslow is a deliberately changed delayed promoter, a
// candidate version for comparisons (fabric plugins replay --against): it
// promotes due delayed executions like the stock delayed_promoter, except
// on the lane "slow", which it never reads.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the changed promoter, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("delayed_promoter", 750, 50,
		[]string{"ff_promote_delayed"}, []string{"ff:idx:*:lane:*:delayed"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:lane:*:delayed"}),
	Scan: scan,
}

func init() {
	Plugin.Manifest.Version = "1.0.0-skipslow"
	pdk.Register(Plugin)
}

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	keys := model.KeysOn(req.Partition)
	laneOf := map[string]string{}
	var indexes []string
	for _, l := range pdk.Lanes(h) {
		if l == "slow" {
			continue // the deliberate change
		}
		idx := keys.LaneDelayed(l)
		indexes = append(indexes, idx)
		laneOf[idx] = l
	}
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return indexes },
		Call: func(d pdk.Due) []abi.Call {
			p := fcall.PromoteDelayedParams{ExecutionID: model.ExecutionID(d.Member), Lane: laneOf[d.Index], NowMs: d.NowMs}
			return []abi.Call{pdk.CallOf(p.Call())}
		},
	}.Run(h, req)
}
