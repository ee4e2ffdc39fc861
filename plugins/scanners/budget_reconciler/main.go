// Command budget_reconciler reconciles the breached_at marker of
// non-resetting budgets and prunes dangling policy-index entries
// (FlowFabric's budget_reconciler, engine spec §9.9): a budget whose usage
// of some hard dimension exceeds its limit gets usage.breached_at = now;
// one back within every limit loses it.
package main

import (
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the budget reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "budget_reconciler",
		Version:    "1.0.0",
		Kind:       abi.KindScanner,
		IntervalMs: 30000,
		Family:     "budget",
		BatchSize:  100,
		TimeoutMs:  10000,
		Capabilities: abi.Capabilities{
			Read:  []string{"ff:idx:*:budget_policies", "ff:budget:*"},
			Write: []string{"ff:idx:*:budget_policies", "ff:budget:*:usage"},
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
	tag := req.Partition.Tag()
	index := "ff:idx:" + tag + ":budget_policies"
	cursor := "0"
	for {
		page, err := h.SScan(abi.ScanCursorRequest{Key: index, Cursor: cursor, Count: 100})
		if err != nil {
			res.Errors++
			return res
		}
		for _, bid := range page.Members {
			res.Scanned++
			changed, err := reconcile(h, index, "ff:budget:"+tag+":"+bid, bid, now)
			switch {
			case err != nil:
				h.Log(abi.LogWarn, "reconcile budget "+bid+": "+err.Error())
				res.Errors++
			case changed:
				res.Acted++
			}
		}
		if cursor = page.Cursor; cursor == "0" || cursor == "" {
			return res
		}
	}
}

func reconcile(h pdk.Host, index, def, bid string, now int64) (bool, error) {
	d, err := pdk.HGetAll(h, def)
	if err != nil {
		return false, err
	}
	if len(d) == 0 {
		h.Write(abi.WriteSRem, index, bid)
		return false, nil
	}
	if v := d["reset_interval_ms"]; v != "" && v != "0" {
		return false, nil
	}
	usage, err := pdk.HGetAll(h, def+":usage")
	if err != nil {
		return false, err
	}
	limits, err := pdk.HGetAll(h, def+":limits")
	if err != nil || len(limits) == 0 {
		return false, err
	}
	breached := false
	for f, v := range limits {
		dim, ok := strings.CutPrefix(f, "hard:")
		if !ok {
			continue
		}
		limit, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			limit = 1<<63 - 1
		}
		if limit <= 0 {
			continue
		}
		cur, _ := strconv.ParseInt(usage[dim], 10, 64)
		if cur > limit {
			breached = true
			break
		}
	}
	_, currently := usage["breached_at"]
	switch {
	case breached && !currently:
		if _, err := h.Write(abi.WriteHSet, def+":usage", "breached_at", strconv.FormatInt(now, 10)); err != nil {
			return false, err
		}
		h.Log(abi.LogInfo, "budget breached: "+bid)
	case !breached && currently:
		if _, err := h.Write(abi.WriteHDel, def+":usage", "breached_at"); err != nil {
			return false, err
		}
		h.Log(abi.LogInfo, "budget back within limits: "+bid)
	}
	return breached != currently, nil
}
