package flowlib_test

import (
	"strings"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/flowlib"
	"github.com/fabric-host/fabric/pdk/pdktest"
)

var manifest = abi.Manifest{Name: "t", Version: "1.0.0", Kind: abi.KindDispatcher,
	Capabilities: abi.Capabilities{
		FCall: []string{"ff_resolve_dependency", "ff_cancel_execution", "ff_drain_sibling_cancel_group"},
		Read:  []string{"ff:exec:*:core", "ff:flow:*", "ff:idx:*:pending_cancel_groups"},
		Write: []string{"ff:idx:*:pending_cancel_groups"},
	}}

// chain seeds a linear chain of n members on a fake host and returns it.
func chain(h *pdktest.Host, parts model.PartitionConfig, flow model.UUID, n int) []model.ExecutionID {
	fk := model.FlowKeysFor(parts.FlowPartition(flow), flow)
	ids := make([]model.ExecutionID, n)
	for i := range ids {
		ids[i] = parts.NewFlowExecutionID(flow)
	}
	for i := 0; i+1 < n; i++ {
		edge := model.NewUUID().String()
		h.SAdd(fk.Outgoing(ids[i]), edge)
		h.HSet(fk.Edge(edge), "downstream_execution_id", string(ids[i+1]))
	}
	h.HSet(model.KeysFor(ids[0]).Core(), "terminal_outcome", "failed")
	return ids
}

// The cascade recurses into skipped children to depth 50 and says so
// when the cap stops it.
func TestCascadeDepthCap(t *testing.T) {
	parts := model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}
	h := pdktest.New(t, manifest)
	flow := model.NewUUID()
	ids := chain(h, parts, flow, 60)
	h.Handle("ff_resolve_dependency", func(keys, args []string) abi.CallResult {
		return abi.CallResult{Status: "OK", Fields: []string{"impossible", "child_skipped"}}
	})
	st := flowlib.Cascade(h, parts, ids[0], flow.String(), 42)
	// Depths 0..50 resolve one edge each; depth 51 hits the cap.
	if st.Resolved != 51 || !st.CapHit || len(h.Calls) != 51 {
		t.Fatalf("stats %+v, %d calls", st, len(h.Calls))
	}
	if got := h.Calls[0].Args[2]; got != "42" {
		t.Fatalf("now_ms ARGV = %s", got)
	}
	found := false
	for _, l := range h.Logs {
		found = found || (l.Level == abi.LogWarn && strings.Contains(l.Msg, "cascade depth limit reached (50)"))
	}
	if !found {
		t.Fatalf("no cap warning in %v", h.Logs)
	}
	// The 14 KEYS / 5 ARGV shape.
	c := h.Calls[0]
	if len(c.Keys) != 14 || len(c.Args) != 5 || c.Args[3] != flow.String() || c.Args[4] != string(ids[1]) {
		t.Fatalf("call %+v", c)
	}
}

// DispatchGroup cancels every sibling of a group above 1024 (two chunks)
// before it drains; a transient failure leaves the group undrained.
func TestDispatchGroupAllSiblings(t *testing.T) {
	parts := model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}
	for _, transient := range []bool{false, true} {
		h := pdktest.New(t, manifest)
		flow := model.NewUUID()
		fp := parts.FlowPartition(flow)
		down := parts.NewFlowExecutionID(flow)
		var sibs []string
		for range 1500 {
			sibs = append(sibs, string(parts.NewFlowExecutionID(flow)))
		}
		fk := model.FlowKeysFor(fp, flow)
		h.HSet(fk.EdgeGroup(down), "cancel_siblings_pending_flag", "true", "cancel_siblings_reason", "sibling_quorum_satisfied",
			"cancel_siblings_pending_members", strings.Join(sibs, "|"))
		pending := model.KeysOn(fp).PendingCancelGroups()
		member := flow.String() + "|" + string(down)
		h.SAdd(pending, member)
		cancels, drains := 0, 0
		h.Handle("ff_cancel_execution", func(keys, args []string) abi.CallResult {
			cancels++
			if transient && cancels == 1400 {
				return abi.CallResult{Result: abi.StatusLuaError, Status: "some_new_code"}
			}
			if len(keys) != 21 || args[2] != "operator_override" || args[1] != "sibling_quorum_satisfied" {
				t.Fatalf("cancel call %v %v", keys, args)
			}
			return abi.CallResult{Status: "OK", Fields: []string{"cancelled"}}
		})
		h.Handle("ff_drain_sibling_cancel_group", func(keys, args []string) abi.CallResult {
			drains++
			return abi.CallResult{Status: "OK", Fields: []string{"drained", ""}}
		})
		out, st := flowlib.DispatchGroup(h, fp, member)
		if transient {
			if out != flowlib.GroupRetry || drains != 0 {
				t.Fatalf("transient: outcome %v, %d drains", out, drains)
			}
			continue
		}
		if out != flowlib.GroupDrained || st.Cancelled != 1500 || cancels != 1500 || drains != 1 {
			t.Fatalf("outcome %v stats %+v cancels %d drains %d", out, st, cancels, drains)
		}
	}
}

// A malformed pending member is removed through the write grant.
func TestDispatchPartitionMalformed(t *testing.T) {
	h := pdktest.New(t, manifest)
	p := model.Partition{Family: model.FamilyFlow, Index: 1}
	pending := model.KeysOn(p).PendingCancelGroups()
	h.SAdd(pending, "garbage")
	res := flowlib.DispatchPartition(h, p, 50)
	if res.Errors != 1 {
		t.Fatalf("%+v", res)
	}
	if ms, _ := pdk.SRandMember(h, pending, 10); len(ms) != 0 {
		t.Fatalf("left %v", ms)
	}
}

// countingHost counts the cascade's round trips to the store.
type countingHost struct {
	*pdktest.Host
	batches, single int
}

func (c *countingHost) ReadBatch(ops []abi.ReadOp) ([]abi.ReadResult, error) {
	c.batches++
	return c.Host.ReadBatch(ops)
}

func (c *countingHost) HMGet(key string, fields ...string) ([]abi.Field, error) {
	c.single++
	return c.Host.HMGet(key, fields...)
}

func (c *countingHost) SMembers(key string) ([]string, error) {
	c.single++
	return c.Host.SMembers(key)
}

// A level of the cascade is two pipelined reads (the outcome with the out
// edges and their downstreams through one SORT_RO, then the children) and
// one batch of resolves, however many children it has; each child's lane
// and attempt reach its call. Where the SORT_RO is refused (an older host,
// an ACL without read access to every key) the out edges and their
// downstreams take a read each, after the refused one, and the resolves
// are the same; a later cascade does not try the SORT_RO again.
func TestCascadeLevelReadsInTwoBatches(t *testing.T) {
	for _, tc := range []struct {
		name          string
		refuse        bool
		batches, next int
	}{{"sort_ro", false, 2, 2}, {"sort_ro refused", true, 4, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			flowlib.ResetSortRefusal()
			t.Cleanup(flowlib.ResetSortRefusal)
			parts := model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}
			h := &countingHost{Host: pdktest.New(t, manifest)}
			if tc.refuse {
				h.ReadErr = func(op abi.ReadOp) string {
					if op.Cmd == "SORT_RO" {
						return "NOPERM this user has no permissions to access one of the keys used as arguments"
					}
					return ""
				}
			}
			flow := model.NewUUID()
			fk := model.FlowKeysFor(parts.FlowPartition(flow), flow)
			up := parts.NewFlowExecutionID(flow)
			h.HSet(model.KeysFor(up).Core(), "terminal_outcome", "success")
			children := map[string]string{} // child → lane
			for _, lane := range []string{"fast", "slow", ""} {
				child := parts.NewFlowExecutionID(flow)
				edge := model.NewUUID().String()
				h.SAdd(fk.Outgoing(up), edge)
				h.HSet(fk.Edge(edge), "downstream_execution_id", string(child))
				if lane != "" {
					h.HSet(model.KeysFor(child).Core(), "lane_id", lane, "current_attempt_index", "2")
				}
				if lane == "" {
					lane = "default"
				}
				children[string(child)] = lane
			}
			// An edge whose hash is gone resolves nothing.
			h.SAdd(fk.Outgoing(up), model.NewUUID().String())
			h.Handle("ff_resolve_dependency", func(keys, args []string) abi.CallResult {
				return abi.CallResult{Status: "OK", Fields: []string{"satisfied"}}
			})
			h.single = 0 // the seeding above is not the cascade's
			st := flowlib.Cascade(h, parts, up, flow.String(), 42)
			if st.Resolved != 3 || st.Errors != 0 || len(h.Calls) != 3 {
				t.Fatalf("stats %+v, %d calls", st, len(h.Calls))
			}
			if h.batches != tc.batches || h.single != 0 {
				t.Fatalf("%d read batches and %d single reads; want %d and 0", h.batches, h.single, tc.batches)
			}
			h.batches = 0
			if st := flowlib.Cascade(h, parts, up, flow.String(), 43); st.Resolved != 3 || h.batches != tc.next {
				t.Fatalf("again: stats %+v, %d read batches; want %d", st, h.batches, tc.next)
			}
			for _, c := range h.Calls[:3] {
				lane, ok := children[c.Args[4]]
				if !ok {
					t.Fatalf("call for %s, not a child", c.Args[4])
				}
				if !strings.Contains(strings.Join(c.Keys, " "), ":lane:"+lane+":") {
					t.Errorf("child %s of lane %s: keys %v", c.Args[4], lane, c.Keys)
				}
			}
		})
	}
}

var _ pdk.Host = (*countingHost)(nil)
