// Command cancel_reconciler finishes flow cancellations (FlowFabric's
// cancel_reconciler, engine spec §9.15): for up to 50 flows per partition
// whose ff:idx:{fp:N}:cancel_backlog grace has passed, it cancels up to
// 500 members still owed a cancel (ff_cancel_execution, source
// operator_override, the flow's cancel_reason) and acknowledges each with
// ff_ack_cancel_member.
package main

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/flowlib"
)

// MaxMembersPerFlow is the most members cancelled per flow per sweep.
const MaxMembersPerFlow = 500

// Plugin is the cancel reconciler, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "cancel_reconciler",
		Version:    "1.0.0",
		Kind:       abi.KindScanner,
		IntervalMs: 15000,
		Family:     "flow",
		BatchSize:  50,
		TimeoutMs:  20000,
		Capabilities: abi.Capabilities{
			FCall:          []string{"ff_cancel_execution", "ff_ack_cancel_member"},
			Read:           []string{"ff:idx:*:cancel_backlog", "ff:flow:*:core", "ff:flow:*:pending_cancels", "ff:exec:*:core"},
			Write:          []string{"ff:idx:*:cancel_backlog", "ff:flow:*:pending_cancels"},
			CrossPartition: true, // members are cancelled on their own partition
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
	backlog := model.KeysOn(req.Partition).CancelBacklog()
	due, err := h.ZRangeByScore(abi.ZRangeRequest{Key: backlog, Min: "-inf", Max: strconv.FormatInt(now, 10), Count: max(req.BatchSize, 1)})
	if err != nil {
		res.Errors++
		return res
	}
	res.Scanned = uint32(len(due.Members))
	for _, raw := range due.Members {
		res.Add(flow(h, req.Partition, backlog, raw))
	}
	return res
}

// retryable reports whether a failed call should be retried rather than
// acknowledged: connection-level failures are, server replies (a Lua
// runtime error, WRONGTYPE) are not (spec §9.15).
func retryable(status string) bool {
	for _, p := range []string{"ERR", "WRONGTYPE", "NOSCRIPT"} {
		if len(status) >= len(p) && status[:len(p)] == p {
			return false
		}
	}
	return true
}

func flow(h pdk.Host, part model.Partition, backlog, raw string) abi.ScanResult {
	var res abi.ScanResult
	fid, err := model.ParseUUID(raw)
	if err != nil {
		h.Write(abi.WriteZRem, backlog, raw)
		res.Errors++
		return res
	}
	f := fid.String()
	fk := model.FlowKeysOn(part, f)
	pending := fk.PendingCancels()
	exists, err := pdk.Exists(h, fk.Core())
	if err != nil {
		res.Errors++
		return res
	}
	if !exists {
		h.Write(abi.WriteDel, pending)
		h.Write(abi.WriteZRem, backlog, f)
		return res
	}
	members, err := pdk.SRandMember(h, pending, MaxMembersPerFlow)
	if err != nil {
		res.Errors++
		return res
	}
	if len(members) == 0 {
		h.Write(abi.WriteZRem, backlog, f)
		return res
	}
	reason, present, err := pdk.HGet(h, fk.Core(), "cancel_reason")
	if err != nil {
		res.Errors++
		return res
	}
	if !present {
		reason = "flow_cancelled"
	}
	var cancels []abi.Call
	var ids []string
	var acks []string
	for _, m := range members {
		eid, err := model.ParseExecutionID(m)
		if err != nil {
			h.Write(abi.WriteSRem, pending, m)
			res.Errors++
			continue
		}
		t, err := flowlib.ReadCancelTarget(h, eid)
		if err != nil {
			res.Errors++ // retried next sweep
			continue
		}
		cancels = append(cancels, flowlib.CancelCall(t, reason))
		ids = append(ids, m)
	}
	if len(cancels) > 0 {
		out, err := h.FCall(cancels)
		if err != nil {
			res.Errors += uint32(len(cancels))
			return res
		}
		for i, r := range out {
			switch {
			case r.OK(),
				r.Result == abi.StatusLuaError && (r.Status == "execution_not_active" || r.Status == "execution_not_found"),
				r.Result == abi.StatusError && !retryable(r.Status):
				acks = append(acks, ids[i])
			default:
				res.Errors++
			}
		}
	}
	if len(acks) == 0 {
		return res
	}
	calls := make([]abi.Call, len(acks))
	for i, m := range acks {
		ack := fcall.AckCancelMemberParams{Flow: fcall.Flow{Partition: part, ID: f}, Member: m}
		calls[i] = pdk.CallOf(ack.Call())
	}
	out, err := h.FCall(calls)
	if err != nil {
		res.Errors += uint32(len(calls))
		return res
	}
	for _, r := range out {
		if r.Result == abi.StatusError {
			res.Errors++
		} else {
			res.Acted++
		}
	}
	return res
}
