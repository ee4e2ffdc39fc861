package valkey_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// reconcileEnv drives executions into each lane-index state with the real
// flowfabric functions.
type reconcileEnv struct{ *schedEnv }

func (e reconcileEnv) create(p valkey.CreateExecutionParams) model.ExecutionID {
	e.t.Helper()
	p.ExecutionID = e.newEID()
	p.Namespace, p.LaneID, p.ExecutionKind = "ns", "default", "k"
	if _, err := e.c.CreateExecution(e.ctx, &p); err != nil {
		e.t.Fatalf("ff_create_execution: %v", err)
	}
	return p.ExecutionID
}

func (e reconcileEnv) claim(eid model.ExecutionID) (valkey.LeaseFence, int) {
	e.t.Helper()
	attempt := model.NewUUID().String()
	r, err := e.c.IssueGrantAndClaim(e.ctx, &valkey.IssueGrantAndClaimParams{
		ExecutionID: eid, WorkerID: "w", WorkerInstanceID: "w-1", Lane: "default",
		LeaseID: model.NewUUID().String(), LeaseTTLMs: 60_000, AttemptID: attempt,
	})
	if err != nil {
		e.t.Fatalf("ff_issue_grant_and_claim: %v", err)
	}
	return valkey.LeaseFence{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch, AttemptID: attempt}, r.AttemptIndex
}

func (e reconcileEnv) suspend(timeoutAt int64) model.ExecutionID {
	e.t.Helper()
	eid := e.create(valkey.CreateExecutionParams{})
	e.hset(model.KeysOn(eid.Partition()).WaitpointHMACSecrets(), map[string]string{
		"current_kid": "k1", "secret:k1": "00112233445566778899aabbccddeeff"})
	fence, att := e.claim(eid)
	cond := `{"condition_type":"signal_set","required_signal_names":["go"],"signal_match_mode":"any","minimum_signal_count":1,"timeout_behavior":"fail","allow_operator_override":true}`
	if _, err := e.c.SuspendExecution(e.ctx, &valkey.SuspendParams{
		ExecutionID: eid, AttemptIndex: att, Fence: fence, SuspensionID: model.NewUUID().String(),
		WaitpointID: model.NewUUID().String(), WaitpointKey: "wk", ReasonCode: "waiting_for_signal", RequestedBy: "worker",
		TimeoutAt: timeoutAt, ResumeConditionJSON: cond, ResumePolicyJSON: `{"resume_delay_ms":0}`, TimeoutBehavior: "fail",
	}); err != nil {
		e.t.Fatalf("ff_suspend_execution: %v", err)
	}
	return eid
}

func (e reconcileEnv) block(reason string) model.ExecutionID {
	e.t.Helper()
	eid := e.create(valkey.CreateExecutionParams{})
	if err := e.c.BlockExecutionForAdmission(e.ctx, eid, reason, "test", e.now()); err != nil {
		e.t.Fatalf("ff_block_execution_for_admission %s: %v", reason, err)
	}
	return eid
}

// placement returns the lane indexes of "default" holding eid, with scores.
func (e reconcileEnv) placement(eid model.ExecutionID) map[string]float64 {
	e.t.Helper()
	out := map[string]float64{}
	for i, key := range model.KeysOn(eid.Partition()).LaneIndexes("default") {
		if s, ok := e.zscore(key, string(eid)); ok {
			out[model.LaneIndexNames[i]] = s
		}
	}
	return out
}

// dumps returns DUMP of every lane index of eid's partition and lane, to
// show a call wrote nothing.
func (e reconcileEnv) dumps(eid model.ExecutionID) []string {
	e.t.Helper()
	raw := e.c.Raw()
	var out []string
	for _, key := range model.KeysOn(eid.Partition()).LaneIndexes("default") {
		s, err := raw.Do(e.ctx, raw.B().Dump().Key(key).Build()).ToString()
		if err != nil && !schedIsNil(err) {
			e.t.Fatalf("DUMP %s: %v", key, err)
		}
		out = append(out, s)
	}
	return out
}

func (e reconcileEnv) zrem(index string, eid model.ExecutionID) {
	e.t.Helper()
	raw := e.c.Raw()
	key := model.KeysOn(eid.Partition()).LaneIndexes("default")[slices.Index(model.LaneIndexNames, index)]
	if err := raw.Do(e.ctx, raw.B().Zrem().Key(key).Member(string(eid)).Build()).Error(); err != nil {
		e.t.Fatal(err)
	}
}

func (e reconcileEnv) zaddIndex(index string, score float64, eid model.ExecutionID) {
	e.t.Helper()
	e.zadd(model.KeysOn(eid.Partition()).LaneIndexes("default")[slices.Index(model.LaneIndexNames, index)], score, string(eid))
}

func (e reconcileEnv) reconcile(eid model.ExecutionID) valkey.IndexRepair {
	e.t.Helper()
	r, err := e.c.ReconcileExecutionIndex(e.ctx, eid, "default")
	if err != nil {
		e.t.Fatalf("fabric_reconcile_execution_index %s: %v", eid, err)
	}
	return r
}

// TestReconcileExecutionIndexStates builds one execution per lane-index
// state with the flowfabric functions, then for each: the reconciler
// leaves it alone while consistent (nothing written), restores it with the
// very score the functions gave it when removed, and moves it back when it
// sits in a wrong index.
func TestReconcileExecutionIndexStates(t *testing.T) {
	t.Parallel()
	e := reconcileEnv{newSchedEnv(t)}
	cases := []struct {
		name  string
		index string
		build func() model.ExecutionID
		// wantScore, when set, checks the functions' score against the
		// documented rule as well.
		wantScore func(core map[string]string) float64
	}{
		{"eligible", "eligible", func() model.ExecutionID {
			return e.create(valkey.CreateExecutionParams{Priority: 7})
		}, func(c map[string]string) float64 {
			at, _ := strconv.ParseInt(c["created_at"], 10, 64)
			return model.EligibleScore(at, 7)
		}},
		{"delayed", "delayed", func() model.ExecutionID {
			return e.create(valkey.CreateExecutionParams{DelayUntil: e.now() + 3_600_000})
		}, func(c map[string]string) float64 { return atof(c["delay_until"]) }},
		{"active", "active", func() model.ExecutionID {
			eid := e.create(valkey.CreateExecutionParams{})
			e.claim(eid)
			return eid
		}, func(c map[string]string) float64 { return atof(c["lease_expires_at"]) }},
		{"suspended_with_timeout", "suspended", func() model.ExecutionID { return e.suspend(e.now() + 3_600_000) }, nil},
		{"suspended_without_timeout", "suspended", func() model.ExecutionID { return e.suspend(0) },
			func(map[string]string) float64 { return model.SuspendedNoTimeoutScore }},
		{"terminal", "terminal", func() model.ExecutionID {
			eid := e.create(valkey.CreateExecutionParams{})
			fence, _ := e.claim(eid)
			if err := e.c.CompleteExecution(e.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: fence}); err != nil {
				t.Fatalf("complete: %v", err)
			}
			return eid
		}, func(c map[string]string) float64 { return atof(c["completed_at"]) }},
		{"blocked_dependencies", "blocked:dependencies", func() model.ExecutionID {
			eid := e.create(valkey.CreateExecutionParams{})
			fence, _ := e.claim(eid)
			if err := e.c.MoveToWaitingChildren(e.ctx, &valkey.MoveToWaitingChildrenParams{ExecutionID: eid, Fence: fence}); err != nil {
				t.Fatalf("move to waiting children: %v", err)
			}
			return eid
		}, func(c map[string]string) float64 { return atof(c["created_at"]) }},
		{"blocked_budget", "blocked:budget", func() model.ExecutionID { return e.block("waiting_for_budget") }, nil},
		{"blocked_quota", "blocked:quota", func() model.ExecutionID { return e.block("waiting_for_quota") }, nil},
		{"blocked_route", "blocked:route", func() model.ExecutionID { return e.block("waiting_for_capable_worker") }, nil},
		{"blocked_operator", "blocked:operator", func() model.ExecutionID { return e.block("paused_by_operator") }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := reconcileEnv{&schedEnv{t: t, c: e.c, ctx: e.ctx}}
			eid := tc.build()
			placed := e.placement(eid)
			score, ok := placed[tc.index]
			if !ok || len(placed) != 1 {
				t.Fatalf("the functions placed %s in %v, want %s alone", eid, placed, tc.index)
			}
			if tc.wantScore != nil {
				if want := tc.wantScore(e.hgetall(model.KeysFor(eid).Core())); score != want {
					t.Fatalf("%s score %v, want %v", tc.index, score, want)
				}
			}

			before := e.dumps(eid)
			if r := e.reconcile(eid); r.Action != valkey.IndexConsistent || r.Index != tc.index || r.Score != score {
				t.Fatalf("consistent execution: %+v", r)
			}
			if after := e.dumps(eid); !slices.Equal(before, after) {
				t.Fatal("a consistent execution's indexes changed")
			}

			// Removed from its index: restored with the same score.
			e.zrem(tc.index, eid)
			r := e.reconcile(eid)
			if r.Action != valkey.IndexRepaired || !r.Added || r.Index != tc.index || r.Score != score || len(r.Removed) != 0 {
				t.Fatalf("after ZREM: %+v", r)
			}
			if got := e.placement(eid); len(got) != 1 || got[tc.index] != score {
				t.Fatalf("after repair: %v, want %s=%v", got, tc.index, score)
			}

			// Moved to two wrong indexes: taken out of them and put back.
			var wrong []string
			for _, n := range model.LaneIndexNames {
				if n != tc.index && len(wrong) < 2 {
					wrong = append(wrong, n)
				}
			}
			e.zrem(tc.index, eid)
			e.zaddIndex(wrong[0], 42, eid)
			e.zaddIndex(wrong[1], 43, eid)
			r = e.reconcile(eid)
			if r.Action != valkey.IndexRepaired || !r.Added || r.Score != score || !slices.Equal(r.Removed, wrong) {
				t.Fatalf("after a move to %v: %+v", wrong, r)
			}
			if got := e.placement(eid); len(got) != 1 || got[tc.index] != score {
				t.Fatalf("after repair: %v, want %s=%v", got, tc.index, score)
			}
		})
	}
}

func atof(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// TestReconcileExecutionIndexScores: a score that follows from the core
// (eligible: priority and created_at) is corrected; one that records a
// moment the core no longer holds (lane:active keeps the claim-time
// expiry after a renewal) is kept.
func TestReconcileExecutionIndexScores(t *testing.T) {
	t.Parallel()
	e := reconcileEnv{newSchedEnv(t)}

	eid := e.create(valkey.CreateExecutionParams{Priority: 3})
	right := e.placement(eid)["eligible"]
	e.zaddIndex("eligible", 5, eid)
	r := e.reconcile(eid)
	if r.Action != valkey.IndexRepaired || !r.Rescored || r.OldScore != 5 || r.Score != right || r.Added {
		t.Fatalf("wrong eligible score: %+v", r)
	}
	if got := e.placement(eid); got["eligible"] != right {
		t.Fatalf("eligible score %v, want %v", got["eligible"], right)
	}

	active := e.create(valkey.CreateExecutionParams{})
	fence, att := e.claim(active)
	claimed := e.placement(active)["active"]
	if _, err := e.c.RenewLease(e.ctx, &valkey.RenewLeaseParams{ExecutionID: active, AttemptIndex: att, AttemptID: fence.AttemptID,
		LeaseID: fence.LeaseID, LeaseEpoch: fence.LeaseEpoch, LeaseTTLMs: 120_000, HistoryGraceMs: 5000}); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if r := e.reconcile(active); r.Action != valkey.IndexConsistent || r.Score != claimed {
		t.Fatalf("renewed lease: %+v (claim-time score %v)", r, claimed)
	}
}

// TestReconcileExecutionIndexLeavesAlone: a member whose core is gone (a
// purged execution) and a state without a lane index are reported and
// nothing is written.
func TestReconcileExecutionIndexLeavesAlone(t *testing.T) {
	t.Parallel()
	e := reconcileEnv{newSchedEnv(t)}

	ghost := e.newEID()
	e.zaddIndex("eligible", 1, ghost)
	e.zaddIndex("terminal", 2, ghost)
	before := e.dumps(ghost)
	if r := e.reconcile(ghost); r.Action != valkey.IndexCoreMissing {
		t.Fatalf("missing core: %+v", r)
	}
	if !slices.Equal(before, e.dumps(ghost)) {
		t.Fatal("a member without core was touched")
	}

	eid := e.create(valkey.CreateExecutionParams{})
	e.hset(model.KeysFor(eid).Core(), map[string]string{"eligibility_state": "blocked_by_lane_state"})
	before = e.dumps(eid)
	r := e.reconcile(eid)
	if r.Action != valkey.IndexUnknownState || r.Phase != "runnable" || r.Eligibility != "blocked_by_lane_state" {
		t.Fatalf("state without index: %+v", r)
	}
	if !slices.Equal(before, e.dumps(eid)) {
		t.Fatal("an execution in a state without index was touched")
	}
}

// TestReconcileExecutionIndexBadInput: malformed ids, a wrong lane and
// keys that are not the execution's get clear errors and change nothing.
func TestReconcileExecutionIndexBadInput(t *testing.T) {
	t.Parallel()
	e := reconcileEnv{newSchedEnv(t)}
	eid := e.create(valkey.CreateExecutionParams{})
	e.zrem("eligible", eid)

	if _, err := e.c.ReconcileExecutionIndex(e.ctx, "not-an-id", "default"); !errors.Is(err, model.ErrExecIDMissingTag) {
		t.Fatalf("malformed id: %v", err)
	}
	if _, err := e.c.ReconcileExecutionIndex(e.ctx, "{fp:1}:nope", "default"); !errors.Is(err, model.ErrExecIDInvalidUUID) {
		t.Fatalf("malformed uuid: %v", err)
	}
	_, err := e.c.ReconcileExecutionIndex(e.ctx, eid, "other")
	if le := schedWantCode(t, err, valkey.CodeLaneMismatch); le.Detail(0) != "default" {
		t.Fatalf("lane mismatch details: %v", le.Details)
	}

	fn := valkey.ReconcileIndexFunction
	keys := valkey.ReconcileIndexKeys(eid, "default")
	for name, c := range map[string]struct {
		keys, args []string
		what       string
	}{
		"raw malformed id":    {keys, []string{"{fp:1}:nope", "default"}, "execution_id"},
		"empty lane":          {keys, []string{string(eid), ""}, "lane_id"},
		"too few keys":        {keys[:11], []string{string(eid), "default"}, "keys"},
		"keys out of order":   {append(append([]string{}, keys[:2]...), append([]string{keys[3], keys[2]}, keys[4:]...)...), []string{string(eid), "default"}, "keys"},
		"other partition key": {valkey.ReconcileIndexKeys(model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: eid.Partition().Index + 1}, model.NewUUID()), "default"), []string{string(eid), "default"}, "keys"},
	} {
		_, err := e.c.FCall(e.ctx, fn, c.keys, c.args)
		if le := schedWantCode(t, err, valkey.CodeInvalidInput); le.Detail(0) != c.what {
			t.Errorf("%s: details %v, want %s", name, le.Details, c.what)
		}
	}
	if got := e.placement(eid); len(got) != 0 {
		t.Fatalf("bad input wrote %v", got)
	}
}
