// Command edge_cancel is the fabric sibling-cancel dispatcher (FlowFabric's
// edge_cancel_dispatcher, engine spec §9.16): for every flow partition a
// batch of completions touched — and, as a sweep, every partition each
// interval — it takes up to 50 members of ff:idx:{fp:N}:pending_cancel_groups,
// cancels every still-listed sibling of the group with ff_cancel_execution
// (source operator_override, reason sibling_quorum_satisfied|impossible)
// and acknowledges with ff_drain_sibling_cancel_group.
//
// Unlike upstream it cancels all siblings (in pipelined chunks of 1024)
// before draining, so groups above 1024 siblings are not stranded.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/flowlib"
)

// Plugin is the edge-cancel dispatcher, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "edge_cancel",
		Version:    "1.0.0",
		Kind:       abi.KindDispatcher,
		IntervalMs: 1000,
		Family:     "flow",
		BatchSize:  50,
		TimeoutMs:  30000,
		Config:     map[string]string{abi.ConfigSweep: "true"},
		Capabilities: abi.Capabilities{
			FCall: []string{"ff_cancel_execution", "ff_drain_sibling_cancel_group"},
			Read:  []string{"ff:idx:*:pending_cancel_groups", "ff:flow:*:edgegroup:*", "ff:exec:*:core"},
			Write: []string{"ff:idx:*:pending_cancel_groups"},
		},
	},
	Scan:     scan,
	Dispatch: dispatch,
}

func init() { pdk.Register(Plugin) }

func main() {}

func batch(n uint32) int {
	if n == 0 {
		return abi.DefaultBatchSize
	}
	return int(n)
}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	return flowlib.DispatchPartition(h, req.Partition, batch(req.BatchSize))
}

func dispatch(h pdk.Host, req abi.DispatchRequest) abi.ScanResult {
	var res abi.ScanResult
	parts := req.Partitions
	if parts.Flow == 0 {
		parts = model.DefaultPartitionConfig()
	}
	seen := map[uint16]bool{}
	for _, c := range req.Completions {
		fid, err := model.ParseUUID(c.FlowID)
		if err != nil {
			continue
		}
		p := parts.FlowPartition(fid)
		if seen[p.Index] {
			continue
		}
		seen[p.Index] = true
		res.Add(flowlib.DispatchPartition(h, p, abi.DefaultBatchSize))
	}
	return res
}
