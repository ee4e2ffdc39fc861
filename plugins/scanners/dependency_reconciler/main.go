// Command dependency_reconciler is the safety net of the completion push
// path (FlowFabric's dependency_reconciler, engine spec §9.12): per lane it
// reads the 50 oldest executions blocked on dependencies and resolves up to
// 20 unresolved edges each whose upstream is already terminal, with the
// same ff_resolve_dependency call as the dependency dispatcher
// (pdk/flowlib). It repairs completions the listener never saw.
//
// Unlike upstream, each sweep reads the next page of a blocked set larger
// than one batch (see window), so long-blocked executions at the head of
// the set cannot starve the rest.
//
// Configuration: "lanes", a comma-separated lane list (default: the lane
// registry, see pdk.Lanes).
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/flowlib"
)

// MaxEdgesPerExec is the most edges examined per execution per sweep.
const MaxEdgesPerExec = 20

// Plugin is the dependency reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "dependency_reconciler",
		Version:    "1.0.0",
		Kind:       abi.KindScanner,
		IntervalMs: 15000,
		Family:     "flow",
		BatchSize:  50,
		TimeoutMs:  10000,
		Capabilities: abi.Capabilities{
			FCall: []string{"ff_resolve_dependency"},
			Read:  []string{"ff:idx:*:lane:*:blocked:dependencies", "ff:exec:*:deps:unresolved", "ff:exec:*:dep:*", "ff:exec:*:core", model.KeyLanesIndex},
			// The upstream's core is read on its own partition.
			CrossPartition: true,
		},
	},
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	var res abi.ScanResult
	pk := model.KeysOn(req.Partition)
	outcomes := map[string]string{} // upstream → terminal outcome or ""
	var now int64
	batch := max(req.BatchSize, 1)
	for _, lane := range flowlib.Lanes(h) {
		key := pk.LaneBlockedDependencies(lane)
		blocked, err := h.ZRangeByScore(abi.ZRangeRequest{Key: key, Min: "-inf", Max: "+inf", Offset: window(h, key, batch, req.Cycle), Count: batch})
		if err != nil {
			h.Log(abi.LogWarn, "blocked:dependencies of "+lane+": "+err.Error())
			res.Errors++
			continue
		}
		res.Scanned += uint32(len(blocked.Members))
		for _, m := range blocked.Members {
			eid := model.ExecutionID(m)
			n, err := reconcile(h, req.Partition, lane, eid, outcomes, &now)
			if err != nil {
				h.Log(abi.LogWarn, "reconcile "+m+": "+err.Error())
				res.Errors++
				continue
			}
			res.Acted += uint32(n)
		}
	}
	return res
}

// window picks the offset of this sweep's page of a blocked set: sweep n
// reads page n mod pages. FlowFabric always read the 50 lowest scores, so
// 50 executions whose upstreams run for long starved every later entry,
// even one whose upstream completed while the listener was away (engine
// spec §15.3); rotating visits every entry within ceil(card/50) sweeps.
func window(h pdk.Host, key string, batch uint32, cycle uint64) uint32 {
	out, err := h.ReadBatch([]abi.ReadOp{{Cmd: "ZCARD", Key: key}})
	if err != nil || len(out) != 1 {
		return 0
	}
	v, _ := out[0].Value()
	card, perr := atoi(v)
	if perr != nil || uint32(card) <= batch || cycle == 0 {
		return 0
	}
	pages := (uint64(card) + uint64(batch) - 1) / uint64(batch)
	return uint32(((cycle - 1) % pages) * uint64(batch))
}

// upstreamOutcome returns the upstream's terminal outcome, or "" while it
// is not terminal (cached per partition call).
func upstreamOutcome(h pdk.Host, up string, cache map[string]string) string {
	if o, ok := cache[up]; ok {
		return o
	}
	o := ""
	if eid, err := model.ParseExecutionID(up); err == nil {
		f, err := h.HMGet(model.KeysFor(eid).Core(), "lifecycle_phase", "terminal_outcome")
		if err == nil && f[0].Value == "terminal" && f[1].Value != "" && f[1].Value != "none" {
			o = f[1].Value
		}
	}
	cache[up] = o
	return o
}

func reconcile(h pdk.Host, part model.Partition, lane string, eid model.ExecutionID, cache map[string]string, now *int64) (int, error) {
	ek := model.KeysFor(eid)
	edges, err := h.SMembers(ek.DepsUnresolved())
	if err != nil || len(edges) == 0 {
		return 0, nil // an error reads as empty, as upstream
	}
	if len(edges) > MaxEdgesPerExec {
		edges = edges[:MaxEdgesPerExec]
	}
	var calls []abi.Call
	var core []abi.Field
	for _, edge := range edges {
		f, err := h.HMGet(ek.DepEdge(edge), "upstream_execution_id")
		if err != nil {
			return 0, err
		}
		up := f[0].Value
		if up == "" {
			continue
		}
		outcome := upstreamOutcome(h, up, cache)
		if outcome == "" {
			continue
		}
		if *now == 0 {
			if *now, err = h.Now(); err != nil {
				*now = 0
				continue
			}
		}
		if core == nil {
			if core, err = h.HMGet(ek.Core(), "current_attempt_index", "flow_id"); err != nil {
				return 0, err
			}
		}
		att := 0
		if a, perr := atoi(core[0].Value); perr == nil {
			att = a
		}
		r := fcall.ResolveDependencyParams{Downstream: eid, Upstream: model.ExecutionID(up), EdgeID: edge, Lane: lane,
			AttemptIndex: att, UpstreamOutcome: outcome, Flow: fcall.Flow{Partition: part, ID: core[1].Value}, NowMs: *now}
		calls = append(calls, pdk.CallOf(r.Call()))
	}
	if len(calls) == 0 {
		return 0, nil
	}
	out, err := h.FCall(calls)
	if err != nil {
		h.Log(abi.LogWarn, "resolve batch of "+string(eid)+": "+err.Error())
		return 0, nil
	}
	n := 0
	for i, r := range out {
		if r.Result == abi.StatusError {
			h.Log(abi.LogWarn, "resolve edge "+calls[i].Args[0]+" of "+string(eid)+": "+r.Status)
			continue
		}
		n++ // any reply counts, Lua error tuples included (spec §9.12)
	}
	return n, nil
}

func atoi(s string) (int, error) {
	n := 0
	if s == "" {
		return 0, errEmpty
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errEmpty
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

var errEmpty = abi.Errorf(abi.CodeBadRequest, "not a number")
