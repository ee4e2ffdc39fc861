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
		(&fcall.SuspendParams{ExecutionID: eid, WaitpointID: "w", IdempotencyKey: "k",
			Extra: []fcall.WaitpointBinding{{WaitpointID: "x", WaitpointKey: "xk"}}}).Call(0),
		(&fcall.AppendFrameParams{ExecutionID: eid, AttemptIndex: 1}).Call(),
	}
	want := map[string]int{"ff_create_execution": 8, "ff_cancel_execution": 21, "ff_expire_execution": 14,
		"ff_resolve_dependency": 14, "ff_drain_sibling_cancel_group": 2, "ff_reconcile_sibling_cancel_group": 2,
		"ff_ack_cancel_member": 2, "ff_promote_delayed": 3, "ff_mark_lease_expired_if_due": 4,
		"ff_unblock_execution": 3, "ff_expire_suspension": 12, "ff_close_waitpoint": 3,
		"ff_suspend_execution": 18 + 3, "ff_append_frame": 4}
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

// The budget and quota layouts build every key on the budget's or
// quota's partition, and send what their struct holds.
func TestBudgetLayoutsStayOnOnePartition(t *testing.T) {
	t.Parallel()
	bp := model.Partition{Family: model.FamilyBudget, Index: 3}
	qp := model.Partition{Family: model.FamilyQuota, Index: 5}
	eid := model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 1}, model.NewUUID())
	bid, qid := model.NewUUID(), model.NewUUID()
	dims := []fcall.BudgetDimension{{Name: "tokens", Hard: 10, Soft: 5}, {Name: "usd", Hard: 3}}
	usage := &fcall.UsageParams{Partition: bp, BudgetID: bid, NowMs: 7, DedupID: "d", ExecutionID: eid,
		Deltas: []fcall.UsageDelta{{Dimension: "tokens", Delta: 2}, {Dimension: "usd", Delta: 1}}}
	for _, tc := range []struct {
		call fcall.Call
		part model.Partition
		keys int
		args []string
	}{
		{(&fcall.CreateBudgetParams{Partition: bp, BudgetID: bid, ScopeType: "lane", ScopeID: "l", Dimensions: dims,
			ResetIntervalMs: 60000, NowMs: 7}).Call(), bp, 5,
			[]string{bid.String(), "lane", "l", "", "", "", "60000", "7", "2", "tokens", "usd", "10", "3", "5", "0"}},
		{usage.ReportUsage(), bp, 3, []string{"2", "tokens", "usd", "2", "1", "7", model.BudgetKeysFor(bp, bid).UsageDedup("d")}},
		{usage.RecordSpend(), bp, 5, []string{"2", "tokens", "2", "usd", "1", "7", model.BudgetKeysFor(bp, bid).UsageDedup("d"), string(eid)}},
		{(&fcall.CreateQuotaPolicyParams{Partition: qp, QuotaID: qid, WindowSeconds: 60, MaxRequestsPerWindow: 100,
			MaxConcurrent: 4, NowMs: 7}).Call(), qp, 5, []string{qid.String(), "60", "100", "4", "7"}},
	} {
		c := tc.call
		if len(c.Keys) != tc.keys || strings.Join(c.Args, "|") != strings.Join(tc.args, "|") {
			t.Errorf("%s: %d KEYS %v ARGV %q, want %d KEYS and %q", c.Function, len(c.Keys), c.Keys, c.Args, tc.keys, tc.args)
		}
		for _, k := range c.Keys {
			if !strings.Contains(k, tc.part.Tag()) {
				t.Errorf("%s: key %s is not on %s", c.Function, k, tc.part.Tag())
			}
		}
	}
	if id, existed := fcall.DecodeCreateBudget(&fcall.Reply{Status: fcall.StatusAlreadySatisfied, Fields: []string{"b"}}); id != "b" || !existed {
		t.Errorf("DecodeCreateBudget: %q %v", id, existed)
	}
	if u := fcall.DecodeUsage(&fcall.Reply{Status: "HARD_BREACH", Fields: []string{"usd", "3", "3"}}); *u != (fcall.UsageResult{Status: "HARD_BREACH", Dimension: "usd", Current: "3", Limit: "3"}) {
		t.Errorf("DecodeUsage: %+v", u)
	}
	if s := fcall.DecodeSuspend(&fcall.Reply{Status: "OK", Fields: []string{"s", "w", "wk", "tok", "1", "x", "xk", "xt"}}); s.SuspensionID != "s" ||
		s.Waitpoint.Token != "tok" || len(s.Extra) != 1 || s.Extra[0].Token != "xt" || s.AlreadySatisfied {
		t.Errorf("DecodeSuspend: %+v", s)
	}
	if a := fcall.DecodeAppendFrame(&fcall.Reply{Status: "OK", Fields: []string{"1-0", "4", ""}}); a.EntryID != "1-0" || a.FrameCount != 4 || a.SummaryVersion != 0 {
		t.Errorf("DecodeAppendFrame: %+v", a)
	}
}
