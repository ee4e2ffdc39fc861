// Command dependency is the fabric dispatcher plugin that resolves a
// completed flow member's outgoing edges (FlowFabric's partition router,
// engine spec §10.2): for each completion of a batch it re-reads the
// member's terminal_outcome, runs ff_resolve_dependency for every edge of
// out:<eid> in one pipelined batch, and recurses into the children it
// skipped, to depth 50 (a warning names the member when the cap stops it;
// dependency_reconciler resolves the rest). now_ms is the server's clock
// (the now host function), not the engine host's.
//
// The logic is pdk/flowlib.Cascade, shared with native callers.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/flowlib"
)

// Plugin is the dependency dispatcher, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:      "dependency",
		Version:   "1.0.0",
		Kind:      abi.KindDispatcher,
		Family:    "flow",
		BatchSize: 256,
		TimeoutMs: 30000,
		Capabilities: abi.Capabilities{
			FCall: []string{"ff_resolve_dependency"},
			Read:  []string{"ff:exec:*:core", "ff:flow:*:out:*", "ff:flow:*:edge:*"},
		},
	},
	Dispatch: dispatch,
}

func init() { pdk.Register(Plugin) }

func main() {}

func dispatch(h pdk.Host, req abi.DispatchRequest) abi.ScanResult {
	var res abi.ScanResult
	parts := req.Partitions
	if parts.Flow == 0 {
		parts = model.DefaultPartitionConfig()
	}
	now, err := h.Now()
	if err != nil {
		h.Log(abi.LogWarn, "now: "+err.Error())
		res.Errors++
		return res
	}
	seen := make(map[string]bool, len(req.Completions))
	for _, c := range req.Completions {
		res.Scanned++
		if seen[c.ExecutionID] {
			res.Skipped++
			continue
		}
		seen[c.ExecutionID] = true
		st := flowlib.CascadeCompletion(h, parts, c, now)
		res.Acted += uint32(st.Resolved)
		res.Errors += uint32(st.Errors)
		if st.CapHit {
			h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: "cascade_depth_cap_hit", Value: 1})
		}
	}
	return res
}
