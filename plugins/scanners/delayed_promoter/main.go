// Command delayed_promoter is the fabric scanner plugin that promotes
// delayed executions whose delay has passed: for each partition and lane it
// reads ff:idx:{fp:N}:lane:<lane>:delayed up to now and runs
// ff_promote_delayed for each due execution in one pipelined batch
// (FlowFabric's delayed_promoter, engine spec §9.2).
//
// Configuration: "lanes", a comma-separated lane list (default "default").
package main

import (
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the delayed promoter, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "delayed_promoter",
		Version:    "1.0.0",
		Kind:       abi.KindScanner,
		IntervalMs: 750,
		Family:     "flow",
		BatchSize:  50,
		TimeoutMs:  5000,
		Config:     map[string]string{"lanes": "default"},
		Capabilities: abi.Capabilities{
			FCall: []string{"ff_promote_delayed"},
			Read:  []string{"ff:idx:*:lane:*:delayed"},
		},
	},
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

// lanes returns the configured lanes.
func lanes(h pdk.Host) []string {
	v, ok := h.Config("lanes")
	if !ok || strings.TrimSpace(v) == "" {
		return []string{"default"}
	}
	var out []string
	for _, l := range strings.Split(v, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	keys := model.KeysOn(req.Partition)
	ls := lanes(h)
	eligible := make(map[string]string, len(ls))
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string {
			out := make([]string, len(ls))
			for i, l := range ls {
				out[i] = keys.LaneDelayed(l)
				eligible[out[i]] = keys.LaneEligible(l)
			}
			return out
		},
		// KEYS: exec_core, lane_delayed, lane_eligible; ARGV: execution_id, now_ms.
		Call: func(index, member string, nowMs int64) abi.Call {
			return abi.Call{
				Function: "ff_promote_delayed",
				Keys:     []string{model.KeysFor(model.ExecutionID(member)).Core(), index, eligible[index]},
				Args:     []string{member, strconv.FormatInt(nowMs, 10)},
				Item:     member,
			}
		},
	}.Run(h, req)
}
