// Package flowlib is the flow engine's logic shared by the dispatch
// plugins, the flow scanners and (through a native pdk.Host) Go callers:
// FlowFabric's partition router cascade (engine spec §10.2), the
// ff_resolve_dependency and ff_cancel_execution call builders, and the
// sibling-cancel group dispatch (§9.16). It talks to Valkey only through
// pdk.Host, so a wasm plugin and a native caller run the same code.
package flowlib

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// MaxCascadeDepth bounds the recursion into skipped children: depths
// 0..50 inclusive are processed, like FlowFabric's router.
const MaxCascadeDepth = 50

// NilSentinel stands for a missing flow id or downstream in the keys the
// dependency reconciler builds for a member without flow_id.
const NilSentinel = fcall.NilSentinel

// ChildSkipped reports a reply of ff_resolve_dependency that skipped the
// child (fcall.ResolveResult.ChildSkipped).
func ChildSkipped(r abi.CallResult) bool {
	rep := pdk.ReplyOf(r)
	return rep != nil && fcall.DecodeResolveDependency(rep).ChildSkipped()
}

// LaneAttempt reads a child's lane_id (default "default") and
// current_attempt_index (default 0).
func LaneAttempt(h pdk.Host, eid model.ExecutionID) (string, int, error) {
	f, err := h.HMGet(model.KeysFor(eid).Core(), "lane_id", "current_attempt_index")
	if err != nil {
		return "", 0, err
	}
	lane, att := laneAttemptOf([]string{f[0].Value, f[1].Value}, []bool{f[0].Present, f[1].Present})
	return lane, att, nil
}

// laneAttemptOf reads lane_id and current_attempt_index (HMGET's values
// and presence, in that order) with LaneAttempt's defaults.
func laneAttemptOf(v []string, present []bool) (string, int) {
	lane := "default"
	if len(v) > 0 && len(present) > 0 && present[0] && v[0] != "" {
		lane = v[0]
	}
	att := 0
	if len(v) > 1 {
		if n, err := strconv.Atoi(v[1]); err == nil && n >= 0 {
			att = n
		}
	}
	return lane, att
}

// errText is err's text, or "short answer" when a batch came back short
// without an error.
func errText(err error) string {
	if err != nil {
		return err.Error()
	}
	return "short answer"
}

// CascadeStats is what one cascade did.
type CascadeStats struct {
	// Resolved counts ff_resolve_dependency calls answered without a
	// server error (Lua error tuples included, as upstream counts them).
	Resolved int
	// Skipped counts children skipped (and recursed into).
	Skipped int
	// Errors counts reads and calls that failed.
	Errors int
	// CapHit is set when the depth cap stopped a recursion.
	CapHit bool
}

// Cascade is the partition router's post-completion cascade
// (dispatch_dependency_resolution): re-read the upstream's
// terminal_outcome, resolve every outgoing edge with
// ff_resolve_dependency (one pipelined batch per level), and recurse into
// each child the call skipped, to depth MaxCascadeDepth.
//
// # Notes
//
//   - nowMs must be server time (the now host function); FlowFabric used
//     the engine host's wall clock here (spec §15.13), so a skewed engine
//     wrote skewed last_resolved_at / completed_at stamps.
//   - Failures are logged and counted; the dependency reconciler repairs
//     what a failed cascade left.
func Cascade(h pdk.Host, parts model.PartitionConfig, eid model.ExecutionID, flowID string, nowMs int64) CascadeStats {
	return CascadeCompletion(h, parts, abi.Completion{ExecutionID: string(eid), FlowID: flowID}, nowMs)
}

// CascadeCompletion is Cascade for one completion message. The outcome is
// re-read from storage, as upstream does; only when the stored
// terminal_outcome is missing (the core was trimmed or deleted before the
// message was handled) does the message's own outcome stand in for it.
// FlowFabric resolved such edges with "" — "not success" — and so skipped
// the children of a member that had succeeded (engine spec §15.14).
func CascadeCompletion(h pdk.Host, parts model.PartitionConfig, c abi.Completion, nowMs int64) CascadeStats {
	var st CascadeStats
	eid, err := model.ParseExecutionID(c.ExecutionID)
	if err != nil {
		st.Errors++
		return st
	}
	cascade(h, parts, eid, c.FlowID, c.Outcome, nowMs, 0, &st)
	return st
}

func cascade(h pdk.Host, parts model.PartitionConfig, eid model.ExecutionID, flowID, hint string, nowMs int64, depth int, st *CascadeStats) {
	if depth > MaxCascadeDepth {
		st.CapHit = true
		h.Log(abi.LogWarn, "cascade depth limit reached ("+strconv.Itoa(MaxCascadeDepth)+
			"); the dependency reconciler will resolve the rest: execution "+string(eid)+" flow "+flowID)
		return
	}
	if flowID == "" {
		return
	}
	fid, err := model.ParseUUID(flowID)
	if err != nil {
		st.Errors++
		h.Log(abi.LogWarn, "cascade: bad flow id "+strconv.Quote(flowID))
		return
	}
	fpart := parts.FlowPartition(fid)
	fk := model.FlowKeysFor(parts.FlowPartition(fid), fid)
	// Two read round trips a level: the outcome with the out edges and
	// their downstreams, then the children's lanes and attempts; then one
	// batch of resolves.
	outcome, edges, downs, err := outEdges(h, fk, eid)
	if err != nil {
		st.Errors++
		h.Log(abi.LogWarn, "cascade: read "+string(eid)+": "+err.Error())
		return
	}
	if outcome == "" && hint != "" {
		h.Log(abi.LogInfo, "cascade: "+string(eid)+" has no stored terminal_outcome; using the message's "+strconv.Quote(hint))
		outcome = hint
	}
	if len(edges) == 0 {
		return
	}
	var childEdges []string
	var children []model.ExecutionID
	var childReads []abi.ReadOp
	for i, v := range downs {
		if v == "" {
			continue
		}
		child, err := model.ParseExecutionID(v)
		if err != nil {
			continue
		}
		childEdges = append(childEdges, edges[i])
		children = append(children, child)
		childReads = append(childReads, abi.ReadOp{Cmd: "HMGET", Key: model.KeysFor(child).Core(), Args: []string{"lane_id", "current_attempt_index"}})
	}
	if len(children) == 0 {
		return
	}
	cores, err := h.ReadBatch(childReads)
	if err != nil || len(cores) != len(childReads) {
		st.Errors += len(children)
		h.Log(abi.LogWarn, "cascade: read the children of "+string(eid)+": "+errText(err))
		return
	}
	calls := make([]abi.Call, 0, len(children))
	resolved := children[:0:0]
	for i, child := range children {
		if cores[i].Err != "" { // fail closed: never default the lane on an error
			st.Errors++
			h.Log(abi.LogWarn, "cascade: read lane of "+string(child)+": "+cores[i].Err)
			continue
		}
		lane, att := laneAttemptOf(cores[i].Values, cores[i].Present)
		r := fcall.ResolveDependencyParams{Downstream: child, Upstream: eid, EdgeID: childEdges[i], Lane: lane,
			AttemptIndex: att, UpstreamOutcome: outcome, Flow: fcall.Flow{Partition: fpart, ID: flowID}, NowMs: nowMs}
		calls = append(calls, pdk.CallOf(r.Call()))
		resolved = append(resolved, child)
	}
	children = resolved
	if len(calls) == 0 {
		return
	}
	out, err := h.FCall(calls)
	if err != nil {
		st.Errors += len(calls)
		h.Log(abi.LogWarn, "cascade: resolve batch of "+string(eid)+": "+err.Error())
		return
	}
	var skipped []model.ExecutionID
	for i, r := range out {
		if r.Result == abi.StatusError || r.Result == abi.StatusSkipped {
			st.Errors++
			h.Log(abi.LogWarn, "cascade: resolve "+calls[i].Args[0]+" → "+string(children[i])+": "+r.Status)
			continue
		}
		st.Resolved++
		if ChildSkipped(r) {
			skipped = append(skipped, children[i])
		}
	}
	st.Skipped += len(skipped)
	for _, child := range skipped {
		cascade(h, parts, child, flowID, "", nowMs, depth+1, st)
	}
}

// downstreamField is the edge hash's field naming its downstream.
const downstreamField = "downstream_execution_id"

// sortRefused is set once a SORT_RO of outEdgesSorted was refused: later
// cascades (of this plugin instance, or this process for a native caller)
// read in two round trips at once instead of paying the refused one each
// time.
var sortRefused atomic.Bool

// outEdges reads eid's terminal_outcome, its outgoing edges and each
// edge's downstream ("" when unreadable): in one round trip through
// outEdgesSorted, else in two — the outcome with the out set, then the
// edge hashes.
func outEdges(h pdk.Host, fk model.FlowKeys, eid model.ExecutionID) (outcome string, edges, downs []string, err error) {
	outcomeOp := abi.ReadOp{Cmd: "HMGET", Key: model.KeysFor(eid).Core(), Args: []string{"terminal_outcome"}}
	if !sortRefused.Load() {
		if outcome, edges, downs, ok := outEdgesSorted(h, fk, eid, outcomeOp); ok {
			return outcome, edges, downs, nil
		}
	}
	first, err := h.ReadBatch([]abi.ReadOp{outcomeOp, {Cmd: "SMEMBERS", Key: fk.Outgoing(eid)}})
	if err == nil && len(first) != 2 {
		err = errors.New("read batch answered " + strconv.Itoa(len(first)) + " results for 2")
	}
	if err == nil && first[0].Err != "" {
		err = errors.New(first[0].Err)
	}
	if err != nil {
		return "", nil, nil, errors.New("terminal_outcome: " + err.Error())
	}
	outcome, _ = first[0].Value()
	if first[1].Err != "" {
		return "", nil, nil, errors.New("out edges: " + first[1].Err)
	}
	var edgeReads []abi.ReadOp
	for _, edge := range first[1].Values {
		eu, perr := model.ParseUUID(edge)
		if perr != nil {
			h.Log(abi.LogWarn, "cascade: bad edge id "+strconv.Quote(edge))
			continue
		}
		edges = append(edges, edge)
		edgeReads = append(edgeReads, abi.ReadOp{Cmd: "HMGET", Key: fk.Edge(eu.String()), Args: []string{downstreamField}})
	}
	if len(edges) == 0 {
		return outcome, nil, nil, nil
	}
	rs, err := h.ReadBatch(edgeReads)
	if err != nil || len(rs) != len(edgeReads) {
		return "", nil, nil, errors.New("edges: " + errText(err))
	}
	downs = make([]string, len(rs))
	for i, d := range rs {
		if v, ok := d.Value(); d.Err == "" && ok {
			downs[i] = v
		}
	}
	return outcome, edges, downs, nil
}

// outEdgesSorted is outEdges in one round trip: outcomeOp, and a SORT_RO
// of the out set that GETs each edge hash's downstream (set and hashes
// carry the flow's hash tag). ok is false when that did not answer; a
// refused SORT_RO — an older host; a Valkey Cluster before Valkey 8.0,
// which denies SORT's GET patterns even on the key's own slot; an ACL
// without read access to every key, which they need — sets sortRefused.
func outEdgesSorted(h pdk.Host, fk model.FlowKeys, eid model.ExecutionID, outcomeOp abi.ReadOp) (outcome string, edges, downs []string, ok bool) {
	first, err := h.ReadBatch([]abi.ReadOp{outcomeOp, {Cmd: "SORT_RO", Key: fk.Outgoing(eid),
		Args: []string{"BY", "nosort", "GET", "#", "GET", fk.Edge("*") + "->" + downstreamField}}})
	if err != nil || len(first) != 2 || first[0].Err != "" || first[1].Err != "" {
		// Refused: the host did not know the command, or the server
		// answered the HMGET beside it and not it. Anything else (the
		// connection) is no reason to stop trying.
		if errors.Is(err, abi.CodeBadRequest) || err == nil && len(first) == 2 && first[0].Err == "" {
			sortRefused.Store(true)
			h.Log(abi.LogInfo, "cascade: SORT_RO with a GET pattern refused ("+errText(firstErr(first, err))+"); out edges are read in two round trips from now on")
		}
		return "", nil, nil, false
	}
	if len(first[1].Values)%2 != 0 {
		return "", nil, nil, false
	}
	outcome, _ = first[0].Value()
	vs, present := first[1].Values, first[1].Present
	for i := 0; i+1 < len(vs); i += 2 {
		if _, perr := model.ParseUUID(vs[i]); perr != nil {
			h.Log(abi.LogWarn, "cascade: bad edge id "+strconv.Quote(vs[i]))
			continue
		}
		down := ""
		if i+1 < len(present) && present[i+1] {
			down = vs[i+1]
		}
		edges, downs = append(edges, vs[i]), append(downs, down)
	}
	return outcome, edges, downs, true
}

// firstErr is what failed in a read batch: its error, else the first
// result's.
func firstErr(rs []abi.ReadResult, err error) error {
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Err != "" {
			return errors.New(r.Err)
		}
	}
	return nil
}

// placeholderWaitpoint stands for "no waitpoint" in ff_cancel_execution's
// KEYS 9-10 (FlowFabric mints a random id; Lua guards both keys with
// EXISTS, so any id on the same tag is equivalent — spec §15.11).
const placeholderWaitpoint = "00000000-0000-0000-0000-000000000000"

// CancelTarget is the pre-read of one execution to cancel.
type CancelTarget struct {
	ID                    model.ExecutionID
	Lane                  string
	Attempt               int
	Waitpoint, WorkerInst string
}

// ReadCancelTarget pre-reads lane_id, current_attempt_index,
// current_waitpoint_id and current_worker_instance_id.
func ReadCancelTarget(h pdk.Host, eid model.ExecutionID) (CancelTarget, error) {
	f, err := h.HMGet(model.KeysFor(eid).Core(), "lane_id", "current_attempt_index", "current_waitpoint_id", "current_worker_instance_id")
	if err != nil {
		return CancelTarget{}, err
	}
	t := CancelTarget{ID: eid, Lane: "default", Waitpoint: f[2].Value, WorkerInst: f[3].Value}
	if f[0].Value != "" {
		t.Lane = f[0].Value
	}
	if a, perr := strconv.Atoi(f[1].Value); perr == nil && a >= 0 {
		t.Attempt = a
	}
	if _, perr := model.ParseUUID(t.Waitpoint); perr != nil {
		t.Waitpoint = placeholderWaitpoint
	}
	return t, nil
}

// CancelCall builds ff_cancel_execution (fcall.CancelExecutionParams) of
// t with source operator_override and no lease.
func CancelCall(t CancelTarget, reason string) abi.Call {
	p := fcall.CancelExecutionParams{ExecutionID: t.ID, Reason: reason, Source: fcall.SourceOperatorOverride,
		Lane: t.Lane, AttemptIndex: t.Attempt, WaitpointID: t.Waitpoint, WorkerInstanceID: t.WorkerInst}
	return pdk.CallOf(p.Call())
}

// ParseGroupMember splits a pending_cancel_groups member
// "<flow_id>|<downstream_eid>" at the first '|'.
func ParseGroupMember(m string) (model.UUID, model.ExecutionID, bool) {
	f, d, ok := strings.Cut(m, "|")
	if !ok || f == "" || d == "" {
		return model.UUID{}, "", false
	}
	fid, err := model.ParseUUID(f)
	if err != nil {
		return model.UUID{}, "", false
	}
	eid, err := model.ParseExecutionID(d)
	if err != nil {
		return model.UUID{}, "", false
	}
	return fid, eid, true
}

// Lanes returns the lanes to scan; see pdk.Lanes.
func Lanes(h pdk.Host) []string { return pdk.Lanes(h) }
