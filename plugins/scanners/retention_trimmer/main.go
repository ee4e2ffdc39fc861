// Command retention_trimmer is the fabric scanner plugin that deletes
// terminal executions past their retention (FlowFabric's
// retention_trimmer, engine spec §9.7: 60 s, 20 per lane). For each lane
// it reads ff:idx:{fp:N}:lane:<lane>:terminal, pre-reads completed_at and
// the policy of every candidate in one pipelined batch, and runs
// fabric_purge_execution (fabric's own library) for those due, which
// re-checks and deletes the execution's keys atomically.
//
// Differences from FlowFabric, on purpose:
//   - the candidate window is completed_at <= now − min_retention_ms
//     (default 0), not now − 24 h, so a per-execution
//     stream_policy.retention_ttl_ms shorter than 24 h takes effect; up to
//     5 pages per lane are read past candidates not yet due, so long
//     retentions do not starve short ones;
//   - one atomic FCALL per execution instead of chunked DELs from the
//     engine; attempt summaries and the suspension satisfied-set/member-map
//     are deleted too.
//
// Configuration: "lanes", "namespace" / "instance_tag" (filter),
// "default_retention_ms" (86400000), "min_retention_ms" (0).
package main

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the retention trimmer, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("retention_trimmer", 60000, 20,
		[]string{"fabric_purge_execution"}, []string{"ff:idx:*:lane:*:terminal", "ff:exec:*:policy"},
		map[string]string{"default_retention_ms": "86400000", "min_retention_ms": "0"}),
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func configMs(h pdk.Host, key string, def int64) int64 {
	if v, ok := h.Config(key); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return def
}

// retention returns the policy's stream_policy.retention_ttl_ms, or def.
func retention(policy string, def int64) int64 {
	if policy == "" {
		return def
	}
	num, ok := policyTTL(policy)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return def
	}
	return n
}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	pk := model.KeysOn(req.Partition)
	def := configMs(h, "default_retention_ms", 86_400_000)
	floor := configMs(h, "min_retention_ms", 0)
	lanes := pdk.Lanes(h)
	indexes := make([]string, len(lanes))
	for i, l := range lanes {
		indexes[i] = pk.LaneTerminal(l)
	}
	dueAt := func(d pdk.Due) (int64, bool) {
		completed, err := strconv.ParseInt(pdk.FieldOr(d.Reads[0], 0, "0"), 10, 64)
		if err != nil || completed <= 0 {
			return 0, false // no completed_at: the purge drops the entry
		}
		pol, _ := d.Reads[1].Value()
		return completed + retention(pol, def), true
	}
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return indexes },
		Max:     func(now int64) int64 { return now - floor },
		Pages:   5,
		PreRead: func(_, member string) []abi.ReadOp {
			k := model.KeysFor(model.ExecutionID(member))
			return []abi.ReadOp{
				{Cmd: "HMGET", Key: k.Core(), Args: []string{"completed_at"}},
				{Cmd: "GET", Key: k.Policy()},
			}
		},
		Call: func(d pdk.Due) []abi.Call {
			if d.Reads[0].Err != "" || d.Reads[1].Err != "" {
				return nil
			}
			if at, ok := dueAt(d); ok && d.NowMs < at {
				return nil
			}
			// KEYS: exec_core, lane terminal, all_executions; ARGV: execution_id, now_ms, default retention ms.
			return []abi.Call{{Function: "fabric_purge_execution",
				Keys: []string{model.KeysFor(model.ExecutionID(d.Member)).Core(), d.Index, pk.AllExecutions()},
				Args: []string{d.Member, pdk.Itoa(d.NowMs), pdk.Itoa(def)}}}
		},
		Later: func(d pdk.Due) int64 {
			at, _ := dueAt(d)
			return at
		},
	}.Run(h, req)
}
