// Command budget_reset resets budgets whose reset time has come
// (FlowFabric's budget_reset, engine spec §9.8): per budget partition it
// reads up to 20 due members of ff:idx:{b:M}:budget_resets and runs
// ff_reset_budget for each, in one pipelined batch.
package main

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the budget reset scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "budget_reset",
		Version:    "1.0.0",
		Kind:       abi.KindScanner,
		IntervalMs: 15000,
		Family:     "budget",
		BatchSize:  20,
		TimeoutMs:  5000,
		Capabilities: abi.Capabilities{
			FCall: []string{"ff_reset_budget"},
			Read:  []string{"ff:idx:*:budget_resets"},
		},
	},
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	var res abi.ScanResult
	now, err := h.Now()
	if err != nil {
		res.Errors++
		return res
	}
	index := model.BudgetKeysOn(req.Partition, "").Resets()
	nowS := strconv.FormatInt(now, 10)
	due, err := h.ZRangeByScore(abi.ZRangeRequest{Key: index, Min: "-inf", Max: nowS, Count: max(req.BatchSize, 1)})
	if err != nil {
		res.Errors++
		return res
	}
	res.Scanned = uint32(len(due.Members))
	if len(due.Members) == 0 {
		return res
	}
	calls := make([]abi.Call, len(due.Members))
	for i, bid := range due.Members {
		p := fcall.ResetBudgetParams{Partition: req.Partition, BudgetID: bid, NowMs: now}
		calls[i] = pdk.CallOf(p.Call())
	}
	out, err := h.FCall(calls)
	if err != nil {
		res.Errors += uint32(len(calls))
		return res
	}
	for i, r := range out {
		if r.Result == abi.StatusError {
			h.Log(abi.LogWarn, "ff_reset_budget "+due.Members[i]+": "+r.Status)
			res.Errors++
			continue
		}
		res.Acted++ // any reply counts (spec §1.5)
	}
	return res
}
