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
		projectPage(h, index, req.Partition, page.Members, now, &res)
		if cursor = page.Cursor; cursor == "0" || cursor == "" {
			return res
		}
	}
}

var states = []string{"completed", "failed", "cancelled", "expired", "skipped", "active", "suspended",
	"waiting", "delayed", "rate_limited", "waiting_children"}

// flowSample is one flow of a page on its way to a summary.
type flowSample struct {
	fid    string
	keys   model.FlowKeys
	total  int64
	sample []string // member ids that parse; each read below
	first  int      // index of its first member's read in the page's batch
}

// projectPage projects the flows of one SSCAN page with FlowFabric's
// per-flow reads (engine spec §9.13) gathered into pipelined batches: the
// EXISTS and SCARD of every flow in one round trip, one SRANDMEMBER per
// flow, then every sampled member's public_state in one round trip —
// a round trip per flow instead of one per member (a page of flows with
// 50 members each was ~54 host calls per flow). Errors read as the spec's
// per-command fallbacks: EXISTS assumes the flow exists, SCARD reads 0,
// a member's state reads "unknown".
func projectPage(h pdk.Host, index string, part model.Partition, fids []string, now int64, res *abi.ScanResult) {
	if len(fids) == 0 {
		return
	}
	res.Scanned += uint32(len(fids))
	ops := make([]abi.ReadOp, 0, 2*len(fids))
	flows := make([]flowSample, len(fids))
	for i, fid := range fids {
		fk := model.FlowKeysOn(part, fid)
		flows[i] = flowSample{fid: fid, keys: fk}
		ops = append(ops, abi.ReadOp{Cmd: "EXISTS", Key: fk.Core()}, abi.ReadOp{Cmd: "SCARD", Key: fk.Members()})
	}
	heads, err := h.ReadBatch(ops)
	if err != nil {
		h.Log(abi.LogWarn, "read flows of "+index+": "+err.Error())
		heads = nil // every flow exists, with no members: nothing to project
	}
	var reads []abi.ReadOp
	live := flows[:0]
	for i, f := range flows {
		if len(heads) == len(ops) {
			if v, ok := heads[2*i].Value(); ok && v == "0" {
				h.Write(abi.WriteSRem, index, f.fid)
				continue
			}
			f.total, _ = strconv.ParseInt(pdk.FieldOr(heads[2*i+1], 0, "0"), 10, 64)
		}
		if f.total <= 0 {
			continue
		}
		sample, err := pdk.SRandMember(h, f.keys.Members(), SampleSize)
		if err != nil || len(sample) == 0 {
			continue
		}
		f.first = len(reads)
		for _, m := range sample {
			eid, err := model.ParseExecutionID(m)
			if err != nil {
				continue // not counted
			}
			f.sample = append(f.sample, m)
			reads = append(reads, abi.ReadOp{Cmd: "HMGET", Key: model.KeysFor(eid).Core(), Args: []string{"public_state"}})
		}
		live = append(live, f)
	}
	var got []abi.ReadResult
	if len(reads) > 0 {
		if got, err = h.ReadBatch(reads); err != nil || len(got) != len(reads) {
			h.Log(abi.LogWarn, "read member states of "+index+": "+errText(err))
			got = nil // each state reads "unknown"
		}
	}
	for _, f := range live {
		count := map[string]int{}
		for j := range f.sample {
			st := "unknown"
			if got != nil {
				if v, ok := got[f.first+j].Value(); ok {
					st = v
				}
			}
			count[st]++
		}
		ok, err := writeSummary(h, index, f, count, now)
		switch {
		case err != nil:
			h.Log(abi.LogWarn, "project flow "+f.fid+": "+err.Error())
			res.Errors++
		case ok:
			res.Acted++
		}
	}
}

func errText(err error) string {
	if err == nil {
		return "short reply"
	}
	return err.Error()
}

// writeSummary derives a flow's summary from its sampled members' states
// and writes it; a fully terminal flow sampled entirely leaves the index.
func writeSummary(h pdk.Host, index string, f flowSample, count map[string]int, now int64) (bool, error) {
	sampled := len(f.sample)
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
	kv := []string{"total_members", strconv.FormatInt(f.total, 10), "sampled_members", strconv.Itoa(sampled)}
	for _, s := range states {
		kv = append(kv, "members_"+s, strconv.Itoa(count[s]))
	}
	kv = append(kv, "public_flow_state", state, "last_summary_update_at", strconv.FormatInt(now, 10))
	if _, err := h.Write(abi.WriteHSet, f.keys.Summary(), kv...); err != nil {
		return false, err
	}
	if allTerminal && int64(sampled) == f.total {
		h.Write(abi.WriteSRem, index, f.fid)
	}
	return true, nil
}
