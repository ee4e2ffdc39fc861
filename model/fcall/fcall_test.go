package fcall_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// TagsJSON must be byte-identical to encoding/json, which the host side
// used before: the tags hash FlowFabric reads is built from it.
func TestTagsJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	cases := []map[string]string{
		{"team": "x"},
		{"b": "2", "a": "1", "": ""},
		{"html": "<a href=\"x\">&amp;</a>", "ctl": "\x00\x01\b\f\n\r\t\x1f\x7f", "back\\slash": `q"uote`},
		{"ls": "a\u2028b\u2029c", "bad": "\xff\xfe ok \xc3", "uni": "héllo 世界 🎉"},
		{"fabric.schedule": "nightly", "fabric.tick": "1700000000000"},
	}
	for _, m := range cases {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := fcall.TagsJSON(m); got != string(want) {
			t.Errorf("TagsJSON(%q)\n got %s\nwant %s", m, got, want)
		}
	}
	if got := fcall.TagsJSON(nil); got != "{}" {
		t.Errorf("TagsJSON(nil) = %s, want {}", got)
	}
}

func FuzzTagsJSON(f *testing.F) {
	f.Add("k", "v")
	f.Add("<&>", "\u2028\xff")
	f.Fuzz(func(t *testing.T, k, v string) {
		m := map[string]string{k: v, "z" + v: k}
		want, _ := json.Marshal(m)
		if got := fcall.TagsJSON(m); got != string(want) {
			t.Fatalf("TagsJSON(%q) = %s, want %s", m, got, want)
		}
	})
}

func TestReplyInt(t *testing.T) {
	t.Parallel()
	r := &fcall.Reply{Fields: []string{"12", "12.0", "x"}}
	if n, err := r.Int(0); n != 12 || err != nil {
		t.Fatalf("Int(0) = %d, %v", n, err)
	}
	if n, err := r.Int(1); n != 12 || err != nil {
		t.Fatalf("Int(1) = %d, %v", n, err)
	}
	if _, err := r.Int(2); !errors.Is(err, fcall.ErrNotANumber) || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("Int(2) error = %v", err)
	}
	if (*fcall.Reply)(nil).Field(0) != "" {
		t.Fatal("nil reply field")
	}
}

// A layout sends what its struct holds and builds every key on the
// execution's partition (the Lua checks the slot of each KEY).
func TestLayoutsStayOnOnePartition(t *testing.T) {
	t.Parallel()
	part := model.Partition{Family: model.FamilyFlow, Index: 7}
	eid := model.NewExecutionID(part, model.NewUUID())
	up := model.NewExecutionID(part, model.NewUUID())
	calls := []fcall.Call{
		(&fcall.CreateExecutionParams[fcall.Millis]{ExecutionID: eid, LaneID: "l", IdempotencyKey: "k"}).Call(),
		(&fcall.CancelExecutionParams{ExecutionID: eid, Lane: "l", WaitpointID: "w"}).Call(),
		(&fcall.ExpireExecutionParams{ExecutionID: eid, Lane: "l", AttemptIndex: 2}).Call(),
		(&fcall.ResolveDependencyParams{Downstream: eid, Upstream: up, EdgeID: "e", Lane: "l", Flow: fcall.Flow{Partition: part}}).Call(),
		(&fcall.SiblingCancelGroup{Flow: fcall.Flow{Partition: part, ID: "f"}, Downstream: eid}).Drain(),
		(&fcall.SiblingCancelGroup{Flow: fcall.Flow{Partition: part, ID: "f"}, Downstream: eid}).Reconcile(),
		(&fcall.AckCancelMemberParams{Flow: fcall.Flow{Partition: part, ID: "f"}, Member: string(eid)}).Call(),
		(&fcall.PromoteDelayedParams{ExecutionID: eid, Lane: "l"}).Call(),
		(&fcall.MarkLeaseExpiredIfDueParams{ExecutionID: eid}).Call(),
		(&fcall.UnblockExecutionParams{ExecutionID: eid, Lane: "l", BlockingReason: "waiting_for_quota"}).Call(),
		(&fcall.ExpireSuspensionParams{ExecutionID: eid, WaitpointID: "w"}).Call(),
		(&fcall.CloseWaitpointParams{ExecutionID: eid, WaitpointID: "w"}).Call(),
	}
	want := map[string]int{"ff_create_execution": 8, "ff_cancel_execution": 21, "ff_expire_execution": 14,
		"ff_resolve_dependency": 14, "ff_drain_sibling_cancel_group": 2, "ff_reconcile_sibling_cancel_group": 2,
		"ff_ack_cancel_member": 2, "ff_promote_delayed": 3, "ff_mark_lease_expired_if_due": 4,
		"ff_unblock_execution": 3, "ff_expire_suspension": 12, "ff_close_waitpoint": 3}
	for _, c := range calls {
		if n, ok := want[c.Function]; !ok || len(c.Keys) != n {
			t.Errorf("%s: %d KEYS, want %d", c.Function, len(c.Keys), n)
		}
		for _, k := range c.Keys {
			if !strings.Contains(k, part.Tag()) {
				t.Errorf("%s: key %s is not on %s", c.Function, k, part.Tag())
			}
		}
	}
	legacy := (&fcall.ResolveDependencyParams{Downstream: eid, Upstream: up, Legacy: true}).Call()
	if len(legacy.Keys) != 11 || len(legacy.Args) != 3 {
		t.Errorf("legacy resolve: %d KEYS / %d ARGV, want 11 / 3", len(legacy.Keys), len(legacy.Args))
	}
	nilFlow := (&fcall.ResolveDependencyParams{Downstream: eid, Upstream: up, Flow: fcall.Flow{Partition: part}}).Call()
	if !strings.Contains(nilFlow.Keys[11], fcall.NilSentinel+":edgegroup:"+fcall.NilSentinel) || nilFlow.Args[4] != string(eid) {
		t.Errorf("resolve without flow id: %v %v", nilFlow.Keys[11:], nilFlow.Args)
	}
}
