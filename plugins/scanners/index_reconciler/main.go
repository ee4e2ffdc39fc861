// Command index_reconciler is the fabric scanner plugin that keeps every
// execution of a partition in the lane index its state says it belongs to
// (FlowFabric's index_reconciler, engine spec §9.3: 45 s, SSCAN pages of
// 100 over the whole all_executions set).
//
// Configuration: "mode" is "repair" (the default) or "log";
// "namespace" / "instance_tag" (the scanner filter).
//
//   - repair: per page, one pipelined HMGET of lifecycle_phase and lane_id
//     per member, then one pipelined FCALL of
//     fabric_reconcile_execution_index (fabric's library) per member with
//     a core: it moves the execution into its one right lane index, with
//     the score the flowfabric functions give it, atomically, and reports
//     what it changed. A repair is counted as acted (and logged); a
//     consistent member is not; a member without core, or whose id is not
//     of this partition, is logged and skipped (nothing is written); a Lua
//     error reply is an error. FlowFabric has no repair: it only logs.
//   - log: FlowFabric's behaviour, read-only: per page, one pipelined HMGET
//     of lifecycle_phase, eligibility_state, ownership_state and lane_id
//     per member, then one pipelined ZSCORE of every expected index; an
//     inconsistency (missing from its index, core missing, malformed id) is
//     logged and counted as acted. FlowFabric makes one round trip each,
//     per member.
package main

import (
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the index reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: manifest(),
	Scan:     scan,
}

// manifest asks a 20 s call timeout: a sweep reads every execution of its
// partitions, terminal ones included, and one call over ~130,000
// executions on a loaded 2-core machine ran past the default 5 s (as the
// other whole-keyspace reconcilers ask, cancel_reconciler among them).
func manifest() abi.Manifest {
	m := pdk.Scanner("index_reconciler", 45000, 100, []string{reconcileFunction},
		[]string{"ff:idx:*:all_executions", "ff:idx:*:lane:*"}, map[string]string{"mode": modeRepair})
	m.TimeoutMs = 20000
	return m
}

// reconcileFunction is fabric's one-execution index repair.
const reconcileFunction = "fabric_reconcile_execution_index"

// Modes of the "mode" config key.
const (
	modeRepair = "repair"
	modeLog    = "log"
)

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	var res abi.ScanResult
	pk := model.KeysOn(req.Partition)
	filter := pdk.FilterFromConfig(h)
	check := repair
	switch mode, _ := h.Config("mode"); mode {
	case "", modeRepair:
	case modeLog:
		check = logOnly
	default:
		h.Log(abi.LogError, "config mode="+mode+": want "+modeRepair+" or "+modeLog+"; nothing scanned")
		res.Errors++
		return res
	}
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

// logOnly is FlowFabric's check of one page: it writes nothing.
func logOnly(h pdk.Host, req abi.ScanRequest, pk model.PartitionKeys, filter pdk.Filter, members []string) abi.ScanResult {
	res, kept, cores := readCores(h, req, filter, members, true, "lifecycle_phase", "eligibility_state", "ownership_state", "lane_id")
	if len(kept) == 0 {
		return res
	}
	var ops []abi.ReadOp
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
			key := model.ExpectedLaneIndex(pk, pdk.FieldOr(c, 0, ""), pdk.FieldOr(c, 1, ""), pdk.FieldOr(c, 2, ""), pdk.FieldOr(c, 3, "default"))
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

// repair reconciles one page: every member with a core gets one
// fabric_reconcile_execution_index call in one pipelined batch.
func repair(h pdk.Host, req abi.ScanRequest, pk model.PartitionKeys, filter pdk.Filter, members []string) abi.ScanResult {
	res, kept, cores := readCores(h, req, filter, members, false, "lifecycle_phase", "lane_id")
	if len(kept) == 0 {
		return res
	}
	var calls []abi.Call
	for i, id := range kept {
		c := cores[i]
		switch {
		case c.Err != "":
			res.Errors++
		case !c.Present[0]:
			h.Log(abi.LogWarn, "execution "+id+" is in all_executions but its core hash is missing; left as is")
			res.Skipped++
		default:
			eid := model.ExecutionID(id)
			k := model.KeysFor(eid)
			lane := pdk.FieldOr(c, 1, "default")
			// KEYS: exec core, suspension:current, the lane's indexes;
			// ARGV: execution id, lane id.
			calls = append(calls, abi.Call{Function: reconcileFunction,
				Keys: append([]string{k.Core(), k.SuspensionCurrent()}, pk.LaneIndexes(lane)...),
				Args: []string{id, lane}, Item: id})
		}
	}
	if len(calls) == 0 {
		return res
	}
	out, err := h.FCall(calls)
	if err != nil {
		h.Log(abi.LogWarn, "fcall batch: "+err.Error())
		res.Errors += uint32(len(calls))
		return res
	}
	for i, r := range out {
		id := calls[i].Args[0]
		switch r.Result {
		case abi.StatusSkipped:
			res.Skipped++
		case abi.StatusOK:
			res.Add(counted(h, id, r.Fields))
		default:
			h.Log(abi.LogWarn, reconcileFunction+" "+id+": "+r.Status+" "+strings.Join(r.Fields, " "))
			res.Errors++
		}
	}
	return res
}

// counted turns one fabric_reconcile_execution_index reply into counts:
// a repair is acted, a member whose core vanished since the read is
// skipped, a consistent member or a state without lane index counts
// nothing (as FlowFabric's check treats it).
func counted(h pdk.Host, id string, f []string) abi.ScanResult {
	field := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch field(0) {
	case "repaired":
		msg := "repaired the lane index of execution " + id + ": in " + field(1) + " with score " + field(2)
		if field(3) == "1" {
			msg += ", added"
		}
		if field(4) != "" {
			msg += ", was scored " + field(4)
		}
		if field(5) != "" {
			msg += ", removed from " + field(5)
		}
		h.Log(abi.LogWarn, msg)
		return abi.ScanResult{Acted: 1}
	case "missing":
		h.Log(abi.LogWarn, "execution "+id+" is in all_executions but its core hash is missing; left as is")
		return abi.ScanResult{Skipped: 1}
	case "consistent", "unknown":
		return abi.ScanResult{}
	}
	h.Log(abi.LogWarn, reconcileFunction+" "+id+": unexpected reply "+strings.Join(f, " "))
	return abi.ScanResult{Errors: 1}
}

// readCores is the first half of checking a page, shared by both modes:
// members on the wrong partition are logged (counted as acted, an
// inconsistency, with countMalformed; else skipped, left as is), the scanner
// filter is applied, and fields are read from every kept member's core in
// one pipelined round trip. kept is empty when there is nothing to check
// or the read failed (counted as errors).
func readCores(h pdk.Host, req abi.ScanRequest, filter pdk.Filter, members []string, countMalformed bool, fields ...string) (abi.ScanResult, []string, []abi.ReadResult) {
	res := abi.ScanResult{Scanned: uint32(len(members))}
	var ids []string
	for _, m := range members {
		switch {
		case pdk.OnPartition(m, req.Partition):
			ids = append(ids, m)
		case countMalformed:
			h.Log(abi.LogWarn, "all_executions holds a malformed id "+m)
			res.Acted++
		default:
			h.Log(abi.LogWarn, "all_executions holds a malformed id "+m+"; left as is")
			res.Skipped++
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
		ops = append(ops, abi.ReadOp{Cmd: "HMGET", Key: model.KeysFor(model.ExecutionID(id)).Core(), Args: fields})
	}
	if len(ops) == 0 {
		return res, nil, nil
	}
	cores, err := h.ReadBatch(ops)
	if err != nil {
		h.Log(abi.LogWarn, "read cores: "+err.Error())
		res.Errors += uint32(len(kept))
		return res, nil, nil
	}
	return res, kept, cores
}
