// Command quota_reconciler repairs quota counters (FlowFabric's
// quota_reconciler, engine spec §9.10): per policy it trims the
// requests_per_window sliding window to the policy's window and recounts
// live admissions (admitted_set members whose admitted:<eid> guard still
// exists), rewriting the concurrency counter when it drifted.
package main

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the quota reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "quota_reconciler",
		Version:    "1.0.0",
		Kind:       abi.KindScanner,
		IntervalMs: 30000,
		Family:     "quota",
		BatchSize:  100,
		TimeoutMs:  10000,
		Capabilities: abi.Capabilities{
			Read:  []string{"ff:idx:*:quota_policies", "ff:quota:*"},
			Write: []string{"ff:quota:*"},
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
	ids, err := h.SMembers("ff:idx:" + tag + ":quota_policies")
	if err != nil {
		res.Errors++
		return res
	}
	for _, qid := range ids {
		res.Scanned++
		did, err := reconcile(h, "ff:quota:"+tag+":"+qid, now)
		switch {
		case err != nil:
			h.Log(abi.LogWarn, "reconcile quota "+qid+": "+err.Error())
			res.Errors++
		case did:
			res.Acted++
		}
	}
	return res
}

func positive(s string) (int64, bool) {
	n, err := strconv.ParseUint(s, 10, 63)
	return int64(n), err == nil && n > 0
}

func reconcile(h pdk.Host, def string, now int64) (bool, error) {
	did := false
	f, err := h.HMGet(def, "requests_per_window_seconds")
	if err != nil {
		return false, err
	}
	if secs, ok := positive(f[0].Value); ok {
		cutoff := max(now-secs*1000, 0)
		n, _ := h.Write(abi.WriteZRemRangeByScore, def+":window:requests_per_window", "-inf", strconv.FormatInt(cutoff, 10))
		did = did || n > 0
	}
	f, err = h.HMGet(def, "active_concurrency_cap")
	if err != nil {
		return false, err
	}
	if _, ok := positive(f[0].Value); !ok {
		return did, nil
	}
	live := int64(0)
	cursor := "0"
	for {
		page, err := h.SScan(abi.ScanCursorRequest{Key: def + ":admitted_set", Cursor: cursor, Count: 100})
		if err != nil {
			return did, err
		}
		for _, eid := range page.Members {
			if ok, err := pdk.Exists(h, def+":admitted:"+eid); err == nil && ok {
				live++
			} else { // an EXISTS error reads as an expired guard, as upstream
				h.Write(abi.WriteSRem, def+":admitted_set", eid)
			}
		}
		if cursor = page.Cursor; cursor == "0" || cursor == "" {
			break
		}
	}
	v, _, err := pdk.Get(h, def+":concurrency")
	if err != nil {
		return did, err
	}
	stored, _ := strconv.ParseInt(v, 10, 64)
	if stored != live {
		if _, err := h.Write(abi.WriteSet, def+":concurrency", strconv.FormatInt(live, 10)); err != nil {
			return did, err
		}
		h.Log(abi.LogInfo, "quota concurrency reconciled: "+def+" "+strconv.FormatInt(stored, 10)+" → "+strconv.FormatInt(live, 10))
		did = true
	}
	return did, nil
}
