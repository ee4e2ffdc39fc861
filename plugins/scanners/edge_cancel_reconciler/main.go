// Command edge_cancel_reconciler cleans pending_cancel_groups tuples a
// crash left between SADD and drain (FlowFabric's edge_cancel_reconciler,
// engine spec §9.17): for up to 50 members per partition it runs
// ff_reconcile_sibling_cancel_group, which drops stale tuples and
// completes the drain of groups whose siblings are all terminal.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/flowlib"
)

// Plugin is the edge-cancel reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "edge_cancel_reconciler",
		Version:    "1.0.0",
		Kind:       abi.KindScanner,
		IntervalMs: 10000,
		Family:     "flow",
		BatchSize:  50,
		TimeoutMs:  10000,
		Capabilities: abi.Capabilities{
			FCall: []string{"ff_reconcile_sibling_cancel_group"},
			Read:  []string{"ff:idx:*:pending_cancel_groups"},
			Write: []string{"ff:idx:*:pending_cancel_groups"},
		},
	},
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	var res abi.ScanResult
	pending := model.KeysOn(req.Partition).PendingCancelGroups()
	members, err := pdk.SRandMember(h, pending, int(max(req.BatchSize, 1)))
	if err != nil {
		res.Errors++
		return res
	}
	res.Scanned = uint32(len(members))
	var calls []abi.Call
	for _, m := range members {
		fid, down, ok := flowlib.ParseGroupMember(m)
		if !ok {
			h.Write(abi.WriteSRem, pending, m)
			res.Errors++
			continue
		}
		g := fcall.SiblingCancelGroup{Flow: fcall.Flow{Partition: req.Partition, ID: fid.String()}, Downstream: down}
		calls = append(calls, pdk.CallOf(g.Reconcile()))
	}
	if len(calls) == 0 {
		return res
	}
	out, err := h.FCall(calls)
	if err != nil {
		res.Errors += uint32(len(calls))
		return res
	}
	for _, r := range out {
		action := ""
		if r.OK() && len(r.Fields) > 0 {
			action = r.Fields[0]
		}
		switch action {
		case "sremmed_stale", "completed_drain":
			res.Acted++
		case "no_op":
			res.Skipped++
		default:
			h.Log(abi.LogWarn, "unparsable ff_reconcile_sibling_cancel_group reply: "+r.Status)
			res.Errors++
			continue
		}
		h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: "sibling_cancel_reconcile." + action, Value: 1})
	}
	return res
}
