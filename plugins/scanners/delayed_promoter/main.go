// Command delayed_promoter is the fabric scanner plugin that promotes
// delayed executions whose delay has passed: for each partition and lane it
// reads ff:idx:{fp:N}:lane:<lane>:delayed up to now and runs
// ff_promote_delayed for each due execution in one pipelined batch
// (FlowFabric's delayed_promoter, engine spec §9.2: 750 ms, 50 per lane).
//
// Configuration: "lanes", a comma-separated lane list (default: the lane
// registry, see pdk.Lanes);
// "namespace" / "instance_tag" (the scanner filter).
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the delayed promoter, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("delayed_promoter", 750, 50,
		[]string{"ff_promote_delayed"}, []string{"ff:idx:*:lane:*:delayed"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:lane:*:delayed"}),
	Scan:      scan,
	ScanBatch: scanBatch,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	return dueScan(pdk.Lanes(h))(req).Run(h, req)
}

// scanBatch promotes on the partitions of a batch call together.
func scanBatch(h pdk.Host, req abi.ScanBatchRequest) []abi.ScanResult {
	return pdk.DueBatch(h, req, dueScan(pdk.Lanes(h)))
}

// dueScan returns the promoter's DueScan of a partition over lanes.
func dueScan(lanes []string) func(req abi.ScanRequest) pdk.DueScan {
	return func(req abi.ScanRequest) pdk.DueScan {
		keys := model.KeysOn(req.Partition)
		laneOf := make(map[string]string, len(lanes))
		indexes := make([]string, len(lanes))
		for i, l := range lanes {
			indexes[i] = keys.LaneDelayed(l)
			laneOf[indexes[i]] = l
		}
		return pdk.DueScan{
			Indexes: func(abi.ScanRequest) []string { return indexes },
			Call: func(d pdk.Due) []abi.Call {
				p := fcall.PromoteDelayedParams{ExecutionID: model.ExecutionID(d.Member), Lane: laneOf[d.Index], NowMs: d.NowMs}
				return []abi.Call{pdk.CallOf(p.Call())}
			},
		}
	}
}
