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
	"slices"

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
		reconcilePage(h, req.Partition, lane, blocked.Members, outcomes, &now, &res)
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

// blockedExec is one blocked execution of a page on its way to its
// ff_resolve_dependency calls.
type blockedExec struct {
	eid   model.ExecutionID
	edges []string // its first MaxEdgesPerExec unresolved edges
	ups   []string // each edge's upstream id ("" when the edge names none)
	first int      // index of its first edge's read in the page's batch
	err   error    // a read that aborts the execution (spec §9.12)
}

// reconcilePage resolves the edges of one page of a lane's blocked
// executions whose upstream is already terminal. It makes FlowFabric's
// reads (engine spec §9.12) with their per-command fallbacks, gathered
// into pipelined batches a page at a time: the unresolved sets, then every
// edge's upstream, then the upstreams' outcomes not cached yet, then the
// cores of the executions with an edge to resolve, then one
// ff_resolve_dependency batch — five host calls a page instead of about
// four per execution. As upstream, an unreadable set reads as empty, an
// unreadable upstream core as not terminal, and an unreadable edge or
// core aborts its execution (one error).
func reconcilePage(h pdk.Host, part model.Partition, lane string, members []string, cache map[string]string, now *int64, res *abi.ScanResult) {
	if len(members) == 0 {
		return
	}
	execs := make([]blockedExec, len(members))
	ops := make([]abi.ReadOp, len(members))
	for i, m := range members {
		execs[i].eid = model.ExecutionID(m)
		ops[i] = abi.ReadOp{Cmd: "SMEMBERS", Key: model.KeysFor(execs[i].eid).DepsUnresolved()}
	}
	sets, err := h.ReadBatch(ops)
	if err != nil || len(sets) != len(ops) {
		return // every set reads as empty
	}
	var edgeReads []abi.ReadOp
	for i := range execs {
		e := &execs[i]
		if sets[i].Err != "" {
			continue
		}
		e.edges = sets[i].Values
		if len(e.edges) > MaxEdgesPerExec {
			e.edges = e.edges[:MaxEdgesPerExec]
		}
		e.first = len(edgeReads)
		ek := model.KeysFor(e.eid)
		for _, edge := range e.edges {
			edgeReads = append(edgeReads, abi.ReadOp{Cmd: "HMGET", Key: ek.DepEdge(edge), Args: []string{"upstream_execution_id"}})
		}
	}
	defer func() {
		for _, e := range execs {
			if e.err != nil {
				h.Log(abi.LogWarn, "reconcile "+string(e.eid)+": "+e.err.Error())
				res.Errors++
			}
		}
	}()
	if len(edgeReads) == 0 {
		return
	}
	edgeOut, err := readAll(h, edgeReads)
	var upReads []abi.ReadOp
	var upIDs []string
	for i := range execs {
		e := &execs[i]
		if len(e.edges) == 0 {
			continue
		}
		if err != nil {
			e.err = err
			continue
		}
		e.ups = make([]string, len(e.edges))
		for j := range e.edges {
			r := edgeOut[e.first+j]
			if r.Err != "" {
				e.err, e.ups = abi.Errorf(abi.CodeBackend, r.Err), nil
				break
			}
			up := pdk.FieldOr(r, 0, "")
			e.ups[j] = up
			if _, known := cache[up]; known || up == "" {
				continue
			}
			uid, perr := model.ParseExecutionID(up)
			if perr != nil {
				cache[up] = ""
				continue
			}
			cache[up] = "" // until read below; read once
			upIDs = append(upIDs, up)
			upReads = append(upReads, abi.ReadOp{Cmd: "HMGET", Key: model.KeysFor(uid).Core(), Args: []string{"lifecycle_phase", "terminal_outcome"}})
		}
	}
	if len(upReads) > 0 {
		if outs, err := readAll(h, upReads); err == nil {
			for k, r := range outs {
				if o := pdk.FieldOr(r, 1, ""); pdk.FieldOr(r, 0, "") == "terminal" && o != "" && o != "none" {
					cache[upIDs[k]] = o
				}
			}
		}
	}
	var coreReads []abi.ReadOp
	var resolving []int
	for i, e := range execs {
		if e.err == nil && slices.ContainsFunc(e.ups, func(up string) bool { return up != "" && cache[up] != "" }) {
			resolving = append(resolving, i)
			coreReads = append(coreReads, abi.ReadOp{Cmd: "HMGET", Key: model.KeysFor(e.eid).Core(), Args: []string{"current_attempt_index", "flow_id"}})
		}
	}
	if len(resolving) == 0 {
		return
	}
	if *now == 0 {
		if *now, err = h.Now(); err != nil {
			*now = 0
			return // no edge resolves without the time (silently, as upstream)
		}
	}
	cores, cerr := readAll(h, coreReads)
	var calls []abi.Call
	var owners []model.ExecutionID
	for k, i := range resolving {
		e := &execs[i]
		switch {
		case cerr != nil:
			e.err = cerr
			continue
		case cores[k].Err != "":
			e.err = abi.Errorf(abi.CodeBackend, cores[k].Err)
			continue
		}
		att, perr := atoi(pdk.FieldOr(cores[k], 0, ""))
		if perr != nil {
			att = 0
		}
		flow := fcall.Flow{Partition: part, ID: pdk.FieldOr(cores[k], 1, "")}
		for j, edge := range e.edges {
			outcome := cache[e.ups[j]]
			if e.ups[j] == "" || outcome == "" {
				continue
			}
			r := fcall.ResolveDependencyParams{Downstream: e.eid, Upstream: model.ExecutionID(e.ups[j]), EdgeID: edge, Lane: lane,
				AttemptIndex: att, UpstreamOutcome: outcome, Flow: flow, NowMs: *now}
			calls = append(calls, pdk.CallOf(r.Call()))
			owners = append(owners, e.eid)
		}
	}
	if len(calls) == 0 {
		return
	}
	out, err := h.FCall(calls)
	if err != nil {
		h.Log(abi.LogWarn, "resolve batch of lane "+lane+": "+err.Error())
		return
	}
	for i, r := range out {
		if r.Result == abi.StatusError {
			h.Log(abi.LogWarn, "resolve edge "+calls[i].Args[0]+" of "+string(owners[i])+": "+r.Status)
			continue
		}
		res.Acted++ // any reply counts, Lua error tuples included (spec §9.12)
	}
}

// readAll runs ops as one read batch; a refused batch or a short reply is
// an error for every op.
func readAll(h pdk.Host, ops []abi.ReadOp) ([]abi.ReadResult, error) {
	out, err := h.ReadBatch(ops)
	if err == nil && len(out) != len(ops) {
		err = abi.Errorf(abi.CodeBackend, "short read batch")
	}
	if err != nil {
		return nil, err
	}
	return out, nil
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
