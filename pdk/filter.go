package pdk

import (
	"slices"
	"strings"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

// Filter is FlowFabric's ScannerFilter: a scanner acts only on executions
// whose exec_core namespace and/or tags field match. The zero value keeps
// everything.
type Filter struct {
	// Namespace, when set, must equal the core's namespace field.
	Namespace string
	// TagKey and TagValue, when TagKey is set, must match the tags hash.
	TagKey, TagValue string
}

// FilterFromConfig reads the filter from the plugin config: "namespace"
// and "instance_tag" ("key=value").
func FilterFromConfig(h Host) Filter {
	var f Filter
	if v, ok := h.Config("namespace"); ok {
		f.Namespace = strings.TrimSpace(v)
	}
	if v, ok := h.Config("instance_tag"); ok {
		if k, val, found := strings.Cut(v, "="); found && k != "" {
			f.TagKey, f.TagValue = k, val
		}
	}
	return f
}

// Noop reports whether the filter keeps everything (no Valkey traffic).
func (f Filter) Noop() bool { return f.Namespace == "" && f.TagKey == "" }

// Keep returns, per execution id, whether the filter keeps it: one
// pipelined read batch (HGET namespace, HGET tag) for all of them.
// Conservative as FlowFabric's: a missing field, a read error, a malformed
// id or an id of another partition is skipped.
func (f Filter) Keep(h Host, p model.Partition, eids []string) []bool {
	keep := make([]bool, len(eids))
	if f.Noop() {
		for i := range keep {
			keep[i] = true
		}
		return keep
	}
	var ops []abi.ReadOp
	var idx []int
	for i, e := range eids {
		if !OnPartition(e, p) {
			continue
		}
		k := model.KeysFor(model.ExecutionID(e))
		idx = append(idx, i)
		if f.Namespace != "" {
			ops = append(ops, abi.ReadOp{Cmd: "HGET", Key: k.Core(), Args: []string{"namespace"}})
		}
		if f.TagKey != "" {
			ops = append(ops, abi.ReadOp{Cmd: "HGET", Key: k.Tags(), Args: []string{f.TagKey}})
		}
	}
	if len(ops) == 0 {
		return keep
	}
	out, err := h.ReadBatch(ops)
	if err != nil {
		h.Log(abi.LogWarn, "filter read: "+err.Error())
		return keep
	}
	per := len(ops) / len(idx)
	for j, i := range idx {
		ok := true
		r := out[j*per : (j+1)*per]
		n := 0
		if f.Namespace != "" {
			v, present := r[n].Value()
			ok = ok && present && v == f.Namespace
			n++
		}
		if f.TagKey != "" {
			v, present := r[n].Value()
			ok = ok && present && v == f.TagValue
		}
		keep[i] = ok
	}
	return keep
}

// LaneRegistryRefreshMs is how long, in server milliseconds, a plugin
// instance reuses the lane registry it read.
const LaneRegistryRefreshMs = 1000

// laneRegistry is this instance's last read of the lane registry.
var laneRegistry struct {
	lanes []string
	atMs  int64
}

// Lanes returns the lanes a lane-scanning plugin scans: the "lanes"
// config entry (comma-separated) when it is set, else the deployment's
// lane registry (model.KeyLanesIndex: the lanes seeded at boot plus
// every lane the SDK has created work on), re-read at most every
// LaneRegistryRefreshMs, else ["default"]. A host serving every lane
// thus needs no lane list, and a new lane is scanned within a second.
func Lanes(h Host) []string {
	v, _ := h.Config("lanes")
	var out []string
	for _, l := range strings.Split(v, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	if len(out) > 0 {
		return out
	}
	now, err := h.Now()
	if err == nil && laneRegistry.lanes != nil && now-laneRegistry.atMs < LaneRegistryRefreshMs && now >= laneRegistry.atMs {
		return laneRegistry.lanes
	}
	lanes, rerr := h.SMembers(model.KeyLanesIndex)
	if rerr != nil || len(lanes) == 0 {
		if rerr != nil {
			h.Log(abi.LogWarn, "read lane registry "+model.KeyLanesIndex+": "+rerr.Error())
		}
		if laneRegistry.lanes != nil {
			return laneRegistry.lanes // the last good read
		}
		return []string{"default"}
	}
	slices.Sort(lanes)
	laneRegistry.lanes, laneRegistry.atMs = lanes, now
	return lanes
}

// FieldOr returns the i-th value of r, or def when it is missing or empty.
func FieldOr(r abi.ReadResult, i int, def string) string {
	if r.Err != "" || i >= len(r.Values) || !r.Present[i] || r.Values[i] == "" {
		return def
	}
	return r.Values[i]
}
