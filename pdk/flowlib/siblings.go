package flowlib

import (
	"strconv"
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// GroupOutcome is what DispatchGroup did with one pending group.
type GroupOutcome int

// Group outcomes (FlowFabric's Drained / SkippedRetry / Error).
const (
	GroupDrained GroupOutcome = iota
	GroupRetry
	GroupError
)

// SiblingChunk is the most sibling cancels sent in one pipelined batch.
// Unlike FlowFabric (which cancels the first 1024 and then drains the
// whole list, stranding the rest — spec §15.9), DispatchGroup cancels
// every listed sibling, chunk by chunk, before it drains.
const SiblingChunk = 1024

// GroupStats counts sibling dispositions.
type GroupStats struct {
	Cancelled, AlreadyTerminal, NotFound int
}

// DispatchGroup handles one pending_cancel_groups member of partition
// part: cancel every sibling listed in
// the edge group (source operator_override, the group's reason), then
// acknowledge with ff_drain_sibling_cancel_group. A transient failure of
// any sibling leaves the group for the next attempt (cancels are
// idempotent).
func DispatchGroup(h pdk.Host, part model.Partition, member string) (GroupOutcome, GroupStats) {
	var st GroupStats
	pending := model.KeysOn(part).PendingCancelGroups()
	fid, down, ok := ParseGroupMember(member)
	if !ok {
		h.Write(abi.WriteSRem, pending, member)
		h.Log(abi.LogWarn, "edge cancel: malformed pending group "+strconv.Quote(member)+" removed")
		return GroupError, st
	}
	group := model.FlowKeysOn(part, fid.String()).EdgeGroup(down)
	f, err := h.HMGet(group, "cancel_siblings_reason", "cancel_siblings_pending_members", "cancel_siblings_pending_flag")
	if err != nil {
		h.Log(abi.LogWarn, "edge cancel: read group "+member+": "+err.Error())
		return GroupRetry, st
	}
	reason, list, flag := f[0].Value, f[1].Value, f[2].Value
	if flag != "" || list != "" {
		if reason == "" {
			reason = "sibling_quorum_satisfied"
		}
		label := "sibling_quorum_satisfied"
		if reason == "sibling_quorum_impossible" {
			label = reason
		}
		var targets []model.ExecutionID
		for _, s := range strings.Split(list, "|") {
			if s == "" {
				continue
			}
			eid, err := model.ParseExecutionID(s)
			if err != nil {
				st.NotFound++
				continue
			}
			targets = append(targets, eid)
		}
		for off := 0; off < len(targets); off += SiblingChunk {
			chunk := targets[off:min(off+SiblingChunk, len(targets))]
			calls := make([]abi.Call, 0, len(chunk))
			for _, eid := range chunk {
				t, err := ReadCancelTarget(h, eid)
				if err != nil {
					h.Log(abi.LogWarn, "edge cancel: read sibling "+string(eid)+": "+err.Error())
					return GroupRetry, st
				}
				calls = append(calls, CancelCall(t, reason))
			}
			h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: "sibling_cancel_dispatched." + label, Value: float64(len(calls))})
			out, err := h.FCall(calls)
			if err != nil {
				h.Log(abi.LogWarn, "edge cancel: cancel batch of "+member+": "+err.Error())
				return GroupRetry, st
			}
			for i, r := range out {
				switch {
				case r.OK():
					st.Cancelled++
				case r.Result == abi.StatusLuaError && r.Status == "execution_not_active":
					st.AlreadyTerminal++
				case r.Result == abi.StatusLuaError && r.Status == "execution_not_found":
					st.NotFound++
				default:
					h.Log(abi.LogWarn, "edge cancel: sibling "+calls[i].Args[0]+" of "+member+": "+r.Status+"; group retried")
					return GroupRetry, st
				}
			}
		}
		h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: "sibling_cancel_disposition.cancelled", Value: float64(st.Cancelled)})
		h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: "sibling_cancel_disposition.already_terminal", Value: float64(st.AlreadyTerminal)})
		h.Metric(abi.Metric{Kind: abi.MetricCounter, Name: "sibling_cancel_disposition.not_found", Value: float64(st.NotFound)})
	}
	drain := fcall.SiblingCancelGroup{Flow: fcall.Flow{Partition: part, ID: fid.String()}, Downstream: down}
	out, err := h.FCall([]abi.Call{pdk.CallOf(drain.Drain())})
	if err != nil || out[0].Result == abi.StatusError {
		msg := ""
		if err != nil {
			msg = err.Error()
		} else {
			msg = out[0].Status
		}
		h.Log(abi.LogWarn, "edge cancel: drain "+member+": "+msg)
		return GroupRetry, st
	}
	return GroupDrained, st
}

// DispatchPartition runs DispatchGroup on up to batch members of the
// partition's pending_cancel_groups (SRANDMEMBER, as upstream).
func DispatchPartition(h pdk.Host, part model.Partition, batch int) abi.ScanResult {
	var res abi.ScanResult
	pending := model.KeysOn(part).PendingCancelGroups()
	members, err := pdk.SRandMember(h, pending, batch)
	if err != nil {
		h.Log(abi.LogWarn, "edge cancel: srandmember "+pending+": "+err.Error())
		res.Errors++
		return res
	}
	res.Scanned = uint32(len(members))
	for _, m := range members {
		switch o, _ := DispatchGroup(h, part, m); o {
		case GroupDrained:
			res.Acted++
		case GroupRetry:
			res.Skipped++
		default:
			res.Errors++
		}
	}
	return res
}
