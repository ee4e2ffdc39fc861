// Command index_reconciler is the fabric scanner plugin that checks every
// execution of a partition is in the index its state says it belongs to
// (FlowFabric's index_reconciler, engine spec §9.3: 45 s, SSCAN pages of
// 100 over the whole all_executions set). It is log-only, as FlowFabric's:
// an inconsistency is logged and counted as acted, nothing is written.
//
// Per page: one pipelined HMGET of lifecycle_phase, eligibility_state,
// ownership_state and lane_id for every member, then one pipelined ZSCORE
// of every expected index (FlowFabric: one round trip each, per member).
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the index reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("index_reconciler", 45000, 100, nil,
		[]string{"ff:idx:*:all_executions", "ff:idx:*:lane:*"}, nil),
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

// expected returns the index an execution in this state must be in, or ""
// when the state has no expected index (treated as consistent).
func expected(pk model.PartitionKeys, phase, elig, own, lane string) string {
	switch phase {
	case "active":
		if own == "leased" {
			return pk.LaneActive(lane)
		}
	case "runnable":
		switch elig {
		case "eligible_now":
			return pk.LaneEligible(lane)
		case "not_eligible_until_time":
			return pk.LaneDelayed(lane)
		case "blocked_by_dependencies":
			return pk.LaneBlockedDependencies(lane)
		case "blocked_by_budget":
			return pk.LaneBlockedBudget(lane)
		case "blocked_by_quota":
			return pk.LaneBlockedQuota(lane)
		case "blocked_by_route":
			return pk.LaneBlockedRoute(lane)
		case "blocked_by_operator":
			return pk.LaneBlockedOperator(lane)
		}
	case "suspended":
		return pk.LaneSuspended(lane)
	case "terminal":
		return pk.LaneTerminal(lane)
	}
	return ""
}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	var res abi.ScanResult
	pk := model.KeysOn(req.Partition)
	filter := pdk.FilterFromConfig(h)
	cursor := "0"
	for {
		page, err := h.SScan(abi.ScanCursorRequest{Key: pk.AllExecutions(), Cursor: cursor, Count: 100})
		if err != nil {
			h.Log(abi.LogWarn, "sscan "+pk.AllExecutions()+": "+err.Error())
			res.Errors++
			return res
		}
		res.Add(check(h, req, pk, filter, page.Members))
		if cursor = page.Cursor; cursor == "0" {
			return res
		}
	}
}

func check(h pdk.Host, req abi.ScanRequest, pk model.PartitionKeys, filter pdk.Filter, members []string) abi.ScanResult {
	res := abi.ScanResult{Scanned: uint32(len(members))}
	var ids []string
	for _, m := range members {
		if pdk.OnPartition(m, req.Partition) {
			ids = append(ids, m)
		} else {
			h.Log(abi.LogWarn, "all_executions holds a malformed id "+m)
			res.Acted++
		}
	}
	keep := filter.Keep(h, req.Partition, ids)
	var ops []abi.ReadOp
	var kept []string
	for i, id := range ids {
		if !keep[i] {
			res.Skipped++
			continue
		}
		kept = append(kept, id)
		ops = append(ops, abi.ReadOp{Cmd: "HMGET", Key: model.KeysFor(model.ExecutionID(id)).Core(),
			Args: []string{"lifecycle_phase", "eligibility_state", "ownership_state", "lane_id"}})
	}
	if len(ops) == 0 {
		return res
	}
	cores, err := h.ReadBatch(ops)
	if err != nil {
		h.Log(abi.LogWarn, "read cores: "+err.Error())
		res.Errors += uint32(len(kept))
		return res
	}
	ops = ops[:0]
	var which []int
	for i, id := range kept {
		c := cores[i]
		switch {
		case c.Err != "":
			res.Errors++
		case !c.Present[0]:
			h.Log(abi.LogWarn, "execution "+id+" is in all_executions but its core hash is missing")
			res.Acted++
		default:
			key := expected(pk, pdk.FieldOr(c, 0, ""), pdk.FieldOr(c, 1, ""), pdk.FieldOr(c, 2, ""), pdk.FieldOr(c, 3, "default"))
			if key != "" {
				which = append(which, i)
				ops = append(ops, abi.ReadOp{Cmd: "ZSCORE", Key: key, Args: []string{id}})
			}
		}
	}
	if len(ops) == 0 {
		return res
	}
	scores, err := h.ReadBatch(ops)
	if err != nil {
		res.Errors += uint32(len(ops))
		return res
	}
	for j, i := range which {
		switch {
		case scores[j].Err != "":
			res.Errors++
		case !scores[j].Present[0]:
			h.Log(abi.LogWarn, "execution "+kept[i]+" is missing from its expected index "+ops[j].Key)
			res.Acted++
		}
	}
	return res
}
