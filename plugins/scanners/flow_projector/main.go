// Command flow_projector derives each flow's summary hash from a sample of
// its members (FlowFabric's flow_projector, engine spec §9.13): per flow
// of ff:idx:{fp:N}:flow_index it samples up to 50 members' public_state
// and writes ff:flow:<tag>:<fid>:summary; it prunes index entries of
// deleted flows and of fully terminal flows it sampled entirely. It never
// writes flow_core.public_flow_state.
package main

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// SampleSize is the SRANDMEMBER count of members per flow.
const SampleSize = 50

// Plugin is the flow projector, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "flow_projector",
		Version:    "1.0.0",
		Kind:       abi.KindScanner,
		IntervalMs: 15000,
		Family:     "flow",
		BatchSize:  100,
		TimeoutMs:  10000,
		Capabilities: abi.Capabilities{
			Read:           []string{"ff:idx:*:flow_index", "ff:flow:*:core", "ff:flow:*:members", "ff:exec:*:core"},
			Write:          []string{"ff:idx:*:flow_index", "ff:flow:*:summary"},
			CrossPartition: true, // member cores on their own partition
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
	index := model.KeysOn(req.Partition).FlowIndex()
	cursor := "0"
	for {
		page, err := h.SScan(abi.ScanCursorRequest{Key: index, Cursor: cursor, Count: 100})
		if err != nil {
			h.Log(abi.LogWarn, "sscan "+index+": "+err.Error())
			res.Errors++
			return res
		}
		for _, fid := range page.Members {
			res.Scanned++
			ok, err := project(h, index, req.Partition, fid, now)
			switch {
			case err != nil:
				h.Log(abi.LogWarn, "project flow "+fid+": "+err.Error())
				res.Errors++
			case ok:
				res.Acted++
			}
		}
		if cursor = page.Cursor; cursor == "0" || cursor == "" {
			return res
		}
	}
}

var states = []string{"completed", "failed", "cancelled", "expired", "skipped", "active", "suspended",
	"waiting", "delayed", "rate_limited", "waiting_children"}

func project(h pdk.Host, index string, part model.Partition, fid string, now int64) (bool, error) {
	fk := model.FlowKeysOn(part, fid)
	exists, err := pdk.Exists(h, fk.Core())
	if err == nil && !exists { // an error assumes it exists
		h.Write(abi.WriteSRem, index, fid)
		return false, nil
	}
	members := fk.Members()
	total, err := pdk.SCard(h, members)
	if err != nil || total == 0 {
		return false, nil
	}
	sample, err := pdk.SRandMember(h, members, SampleSize)
	if err != nil || len(sample) == 0 {
		return false, nil
	}
	count := map[string]int{}
	sampled := 0
	for _, m := range sample {
		eid, err := model.ParseExecutionID(m)
		if err != nil {
			continue
		}
		st := "unknown"
		if f, err := h.HMGet(model.KeysFor(eid).Core(), "public_state"); err == nil && f[0].Present {
			st = f[0].Value
		}
		count[st]++
		sampled++
	}
	terminal := count["completed"] + count["skipped"] + count["failed"] + count["cancelled"] + count["expired"]
	allTerminal := sampled > 0 && terminal == sampled
	var state string
	switch {
	case allTerminal && count["failed"]+count["cancelled"]+count["expired"] > 0:
		state = "failed"
	case allTerminal:
		state = "completed"
	case count["active"] > 0:
		state = "running"
	case count["suspended"]+count["delayed"]+count["rate_limited"]+count["waiting_children"] > 0:
		state = "blocked"
	default:
		state = "open"
	}
	kv := []string{"total_members", strconv.FormatInt(total, 10), "sampled_members", strconv.Itoa(sampled)}
	for _, s := range states {
		kv = append(kv, "members_"+s, strconv.Itoa(count[s]))
	}
	kv = append(kv, "public_flow_state", state, "last_summary_update_at", strconv.FormatInt(now, 10))
	if _, err := h.Write(abi.WriteHSet, fk.Summary(), kv...); err != nil {
		return false, err
	}
	if allTerminal && int64(sampled) == total {
		h.Write(abi.WriteSRem, index, fid)
	}
	return true, nil
}
