package valkey_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// testSecret is the keystore secret the suspension tests install as k1.
const testSecret = "00112233445566778899aabbccddeeff"

// suspFix is the fixture of the suspension, signal and stream tests. It is
// self-contained so it does not depend on other families' test helpers.
type suspFix struct {
	t   *testing.T
	c   *valkey.Client
	ctx context.Context
}

func setupSusp(t *testing.T) *suspFix {
	t.Helper()
	return &suspFix{t: t, c: valkeytest.Client(t), ctx: valkeytest.Context(t, 30*time.Second)}
}

// eid mints a solo execution id on lane default.
func (f *suspFix) eid() model.ExecutionID {
	return model.DefaultPartitionConfig().NewSoloExecutionID("default")
}

func (f *suspFix) now() int64 {
	f.t.Helper()
	n, err := f.c.ServerTime(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *suspFix) fcall(call valkey.Call) (*valkey.Reply, error) {
	return f.c.FCall(f.ctx, call.Function, call.Keys, call.Args)
}

func (f *suspFix) hgetall(key string) map[string]string {
	f.t.Helper()
	m, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		f.t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

func (f *suspFix) get(key string) (string, bool) {
	s, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Get().Key(key).Build()).ToString()
	return s, err == nil
}

func (f *suspFix) exists(key string) bool {
	f.t.Helper()
	n, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		f.t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

func (f *suspFix) zscore(key, member string) (float64, bool) {
	s, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Zscore().Key(key).Member(member).Build()).AsFloat64()
	return s, err == nil
}

func (f *suspFix) sismember(key, member string) bool {
	f.t.Helper()
	ok, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Sismember().Key(key).Member(member).Build()).AsBool()
	if err != nil {
		f.t.Fatalf("SISMEMBER %s: %v", key, err)
	}
	return ok
}

func (f *suspFix) pttl(key string) int64 {
	f.t.Helper()
	n, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		f.t.Fatalf("PTTL %s: %v", key, err)
	}
	return n
}

func (f *suspFix) hset(key string, kv ...string) {
	f.t.Helper()
	cmd := f.c.Raw().B().Hset().Key(key).FieldValue()
	for i := 0; i+1 < len(kv); i += 2 {
		cmd = cmd.FieldValue(kv[i], kv[i+1])
	}
	if err := f.c.Raw().Do(f.ctx, cmd.Build()).Error(); err != nil {
		f.t.Fatalf("HSET %s: %v", key, err)
	}
}

// history is eid's lease history, oldest first.
func (f *suspFix) history(eid model.ExecutionID) []map[string]string {
	return f.xrange(model.KeysFor(eid).LeaseHistory())
}

// grant issues a claim grant for worker w1/wi1 on lane default.
func (f *suspFix) grant(eid model.ExecutionID) {
	f.t.Helper()
	if err := f.c.IssueClaimGrant(f.ctx, &valkey.IssueClaimGrantParams{ExecutionID: eid, WorkerID: "w1",
		WorkerInstanceID: "wi1", Lane: "default", GrantTTLMs: 5000}); err != nil {
		f.t.Fatalf("IssueClaimGrant: %v", err)
	}
}

func (f *suspFix) claimParams(eid model.ExecutionID) *valkey.ClaimExecutionParams {
	return &valkey.ClaimExecutionParams{ExecutionID: eid, WorkerID: "w1", WorkerInstanceID: "wi1",
		LaneID: "default", LeaseTTLMs: 30_000}
}

// claimed creates an execution on lane default and claims it.
func (f *suspFix) claimed() (model.ExecutionID, *valkey.ClaimResult) {
	f.t.Helper()
	eid := f.eid()
	if _, err := f.c.CreateExecution(f.ctx, &valkey.CreateExecutionParams{ExecutionID: eid, Namespace: "ns",
		LaneID: "default", ExecutionKind: "kind"}); err != nil {
		f.t.Fatalf("CreateExecution: %v", err)
	}
	f.grant(eid)
	res, err := f.c.ClaimExecution(f.ctx, f.claimParams(eid))
	if err != nil {
		f.t.Fatalf("ClaimExecution: %v", err)
	}
	return eid, res
}

// suspWantCode fails unless err is a *LuaError with code.
func suspWantCode(t *testing.T, err error, code valkey.ErrorCode) *valkey.LuaError {
	t.Helper()
	var le *valkey.LuaError
	if !errors.As(err, &le) || le.Code != code {
		t.Fatalf("error = %v; want code %s", err, code)
	}
	return le
}

func suspWantFields(t *testing.T, what string, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s[%s] = %q (present %v); want %q", what, k, g, ok, v)
		}
	}
}

// keystore installs kid k1 = testSecret on eid's partition.
func (f *suspFix) keystore(eid model.ExecutionID) string {
	f.t.Helper()
	key := model.KeysOn(eid.Partition()).WaitpointHMACSecrets()
	f.hset(key, "current_kid", "k1", "secret:k1", testSecret)
	return key
}

// goToken computes a waitpoint token in Go (crypto/hmac + sha1).
func goToken(kid, secretHex, wpID, wpKey, createdAt string) string {
	key, err := hex.DecodeString(secretHex)
	if err != nil {
		panic(err)
	}
	m := hmac.New(sha1.New, key)
	m.Write([]byte(wpID + "|" + wpKey + "|" + createdAt))
	return kid + ":" + hex.EncodeToString(m.Sum(nil))
}

// signalCond is a single-waitpoint matcher condition.
func signalCond(mode string, min int, names ...string) string {
	if names == nil {
		names = []string{}
	}
	b, _ := json.Marshal(map[string]any{
		"condition_type": "signal_set", "required_signal_names": names,
		"signal_match_mode": mode, "minimum_signal_count": min,
		"timeout_behavior": "fail", "allow_operator_override": true,
	})
	return string(b)
}

// active creates and claims an execution and installs the keystore.
func (f *suspFix) active() (model.ExecutionID, *valkey.ClaimResult) {
	f.t.Helper()
	eid, cl := f.claimed()
	f.keystore(eid)
	return eid, cl
}

// suspendParams are default params suspending on a fresh waitpoint that
// resumes on one "approve" signal.
func (f *suspFix) suspendParams(eid model.ExecutionID, cl *valkey.ClaimResult) *valkey.SuspendParams {
	return &valkey.SuspendParams{
		ExecutionID: eid, AttemptIndex: cl.AttemptIndex, Fence: cl.Fence(),
		SuspensionID: model.NewUUID().String(), WaitpointID: model.NewUUID().String(),
		WaitpointKey: "wpk-" + model.NewUUID().String()[:8], ReasonCode: "waiting_for_signal",
		RequestedBy: "worker", ResumeConditionJSON: signalCond("any", 1, "approve"),
		ResumePolicyJSON: `{"resume_delay_ms":0}`,
	}
}

func (f *suspFix) suspend(p *valkey.SuspendParams) *valkey.SuspendResult {
	f.t.Helper()
	res, err := f.c.SuspendExecution(f.ctx, p)
	if err != nil {
		f.t.Fatalf("SuspendExecution: %v", err)
	}
	return res
}

// suspended returns an execution suspended with default params.
func (f *suspFix) suspended() (model.ExecutionID, *valkey.SuspendParams, *valkey.SuspendResult) {
	f.t.Helper()
	eid, cl := f.active()
	p := f.suspendParams(eid, cl)
	return eid, p, f.suspend(p)
}

func (f *suspFix) smembers(key string) []string {
	f.t.Helper()
	m, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Smembers().Key(key).Build()).AsStrSlice()
	if err != nil {
		f.t.Fatalf("SMEMBERS %s: %v", key, err)
	}
	return m
}

func (f *suspFix) xrange(key string) []map[string]string {
	f.t.Helper()
	entries, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Xrange().Key(key).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		f.t.Fatalf("XRANGE %s: %v", key, err)
	}
	out := make([]map[string]string, len(entries))
	for i, e := range entries {
		out[i] = e.FieldValues
	}
	return out
}

func (f *suspFix) del(keys ...string) {
	f.t.Helper()
	if err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Del().Key(keys...).Build()).Error(); err != nil {
		f.t.Fatal(err)
	}
}

// dbsize counts the keys of the test database.
func (f *suspFix) dbsize() int64 {
	f.t.Helper()
	n, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Dbsize().Build()).AsInt64()
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func TestHMACTokenVectors(t *testing.T) {
	t.Parallel()
	f := setupSusp(t)
	// A short key, a key longer than the 64-byte block (reduced by SHA1),
	// and one exactly 64 bytes.
	for i, secret := range []string{testSecret, strings.Repeat("ab", 100), strings.Repeat("0f", 64)} {
		eid, cl := f.claimed()
		key := f.keystore(eid)
		f.hset(key, "secret:k1", secret)
		wp := model.NewUUID().String()
		g, err := f.c.CreatePendingWaitpoint(f.ctx, &valkey.CreatePendingWaitpointParams{
			ExecutionID: eid, AttemptIndex: cl.AttemptIndex, WaitpointID: wp,
			WaitpointKey: "key|" + strconv.Itoa(i), ExpiresAt: f.now() + 60_000})
		if err != nil {
			t.Fatal(err)
		}
		created := f.hgetall(model.KeysOn(eid.Partition()).Waitpoint(wp))["created_at"]
		if want := goToken("k1", secret, wp, "key|"+strconv.Itoa(i), created); g.Token != want {
			t.Errorf("secret %d: token %s; Go HMAC-SHA1 gives %s", i, g.Token, want)
		}
	}
}

func TestSuspendExecution(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		p := f.suspendParams(eid, cl)
		before := f.now()
		res := f.suspend(p)
		k, pk := model.KeysFor(eid), model.KeysOn(eid.Partition())
		if res.AlreadySatisfied || res.SuspensionID != p.SuspensionID || res.Waitpoint.WaitpointID != p.WaitpointID ||
			res.Waitpoint.WaitpointKey != p.WaitpointKey || len(res.Extra) != 0 {
			t.Fatalf("reply %+v", res)
		}
		wp := f.hgetall(pk.Waitpoint(p.WaitpointID))
		if want := goToken("k1", testSecret, p.WaitpointID, p.WaitpointKey, wp["created_at"]); res.Waitpoint.Token != want {
			t.Fatalf("token %s, want %s", res.Waitpoint.Token, want)
		}
		created, _ := strconv.ParseInt(wp["created_at"], 10, 64)
		if created < before {
			t.Fatalf("created_at %d before %d", created, before)
		}
		suspWantFields(t, "waitpoint", wp, map[string]string{
			"waitpoint_id": p.WaitpointID, "execution_id": string(eid), "attempt_index": "0",
			"suspension_id": p.SuspensionID, "waitpoint_key": p.WaitpointKey, "waitpoint_token": res.Waitpoint.Token,
			"state": "active", "activated_at": wp["created_at"], "expires_at": "", "signal_count": "0",
			"matched_signal_count": "0", "last_signal_at": ""})
		suspWantFields(t, "condition", f.hgetall(pk.WaitpointCondition(p.WaitpointID)), map[string]string{
			"condition_type": "signal_set", "match_mode": "any", "minimum_signal_count": "1",
			"total_matchers": "1", "satisfied_count": "0", "closed": "0", "updated_at": wp["created_at"],
			"matcher:0:name": "approve", "matcher:0:satisfied": "0", "matcher:0:signal_id": ""})
		core := f.hgetall(k.Core())
		suspWantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "suspended", "ownership_state": "unowned", "eligibility_state": "not_applicable",
			"blocking_reason": "waiting_for_signal", "terminal_outcome": "none",
			"blocking_detail": "suspended: waitpoint " + p.WaitpointID + " awaiting waiting_for_signal",
			"attempt_state":   "attempt_interrupted", "public_state": "suspended", "current_lease_id": "",
			"current_worker_id": "", "current_worker_instance_id": "", "lease_expires_at": "",
			"current_suspension_id": p.SuspensionID, "current_waitpoint_id": p.WaitpointID,
			"current_lease_epoch": "1", "last_transition_at": wp["created_at"]})
		suspWantFields(t, "attempt", f.hgetall(k.Attempt(0)), map[string]string{
			"attempt_state": "suspended", "suspended_at": wp["created_at"], "suspension_id": p.SuspensionID})
		if f.exists(k.LeaseCurrent()) {
			t.Error("lease_current survived")
		}
		if _, ok := f.zscore(pk.LaneActive("default"), string(eid)); ok {
			t.Error("still in lane active")
		}
		if _, ok := f.zscore(pk.LeaseExpiry(), string(eid)); ok {
			t.Error("still in lease_expiry")
		}
		if f.sismember(pk.WorkerLeases("wi1"), string(eid)) {
			t.Error("still in worker leases")
		}
		if s, ok := f.zscore(pk.LaneSuspended("default"), string(eid)); !ok || s != 9999999999999 {
			t.Errorf("suspended score %v %v", s, ok)
		}
		if _, ok := f.zscore(pk.SuspensionTimeout(), string(eid)); ok {
			t.Error("indexed in suspension_timeout without a timeout")
		}
		if m := f.smembers(k.Waitpoints()); len(m) != 1 || m[0] != p.WaitpointID {
			t.Errorf("waitpoints %v", m)
		}
		suspWantFields(t, "suspension", f.hgetall(k.SuspensionCurrent()), map[string]string{
			"suspension_id": p.SuspensionID, "execution_id": string(eid), "attempt_index": "0",
			"waitpoint_id": p.WaitpointID, "waitpoint_key": p.WaitpointKey, "additional_waitpoints_json": "[]",
			"reason_code": "waiting_for_signal", "requested_by": "worker", "created_at": wp["created_at"],
			"timeout_at": "", "timeout_behavior": "fail", "resume_condition_json": p.ResumeConditionJSON,
			"resume_policy_json": p.ResumePolicyJSON, "continuation_metadata_pointer": "",
			"buffered_signal_summary_json": `{"total_count":0,"matched_count":0,"signal_names":[]}`,
			"last_signal_at":               "", "satisfied_at": "", "closed_at": "", "close_reason": ""})
		h := f.history(eid)
		suspWantFields(t, "released", h[len(h)-1], map[string]string{"event": "released", "reason": "suspend",
			"lease_id": cl.LeaseID, "lease_epoch": "1", "attempt_index": "0", "attempt_id": cl.AttemptID})
	})

	t.Run("TimeoutIndexedAndReasonMapped", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		p := f.suspendParams(eid, cl)
		p.TimeoutAt = f.now() + 3_600_000
		p.ReasonCode = "waiting_for_operator_review"
		f.suspend(p)
		pk := model.KeysOn(eid.Partition())
		if s, _ := f.zscore(pk.LaneSuspended("default"), string(eid)); int64(s) != p.TimeoutAt {
			t.Errorf("suspended score %v", s)
		}
		if s, _ := f.zscore(pk.SuspensionTimeout(), string(eid)); int64(s) != p.TimeoutAt {
			t.Errorf("timeout score %v", s)
		}
		suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{"blocking_reason": "paused_by_operator"})
		suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(p.WaitpointID)), map[string]string{
			"expires_at": strconv.FormatInt(p.TimeoutAt, 10)})
	})

	t.Run("IdempotentReplay", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		p := f.suspendParams(eid, cl)
		p.IdempotencyKey = "idem-1"
		first := f.suspend(p)
		dedup := model.KeysFor(eid).SuspendDedup("idem-1")
		stored := f.hgetall(dedup)["outcome"]
		if want := strings.Join([]string{"OK", p.SuspensionID, p.WaitpointID, p.WaitpointKey, first.Waitpoint.Token, "0"}, "\t"); stored != want {
			t.Fatalf("dedup outcome %q, want %q", stored, want)
		}
		if ttl := f.pttl(dedup); ttl <= 604_000_000 || ttl > 604_800_000 {
			t.Errorf("dedup ttl %d", ttl)
		}
		n := f.dbsize()
		again, err := f.c.SuspendExecution(f.ctx, p)
		if err != nil || again.Waitpoint != first.Waitpoint || again.SuspensionID != first.SuspensionID {
			t.Fatalf("replay %+v %v", again, err)
		}
		if f.dbsize() != n {
			t.Error("replay changed the keyspace")
		}
	})

	t.Run("ExtraWaitpoints", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		p := f.suspendParams(eid, cl)
		x1, x2 := model.NewUUID().String(), model.NewUUID().String()
		p.Extra = []valkey.WaitpointBinding{{WaitpointID: x1, WaitpointKey: "k-x1"}, {WaitpointID: x2, WaitpointKey: "k-x2"}}
		res := f.suspend(p)
		pk, k := model.KeysOn(eid.Partition()), model.KeysFor(eid)
		if len(res.Extra) != 2 || res.Extra[0].WaitpointID != x1 || res.Extra[1].WaitpointKey != "k-x2" {
			t.Fatalf("extras %+v", res.Extra)
		}
		for _, g := range res.Extra {
			wp := f.hgetall(pk.Waitpoint(g.WaitpointID))
			if g.Token != goToken("k1", testSecret, g.WaitpointID, g.WaitpointKey, wp["created_at"]) {
				t.Errorf("extra token %s", g.Token)
			}
			suspWantFields(t, "extra waitpoint", wp, map[string]string{"state": "active", "suspension_id": p.SuspensionID,
				"waitpoint_token": g.Token, "execution_id": string(eid)})
			suspWantFields(t, "extra condition", f.hgetall(pk.WaitpointCondition(g.WaitpointID)),
				map[string]string{"matcher:0:name": "approve", "closed": "0"})
		}
		if m := f.smembers(k.Waitpoints()); len(m) != 3 {
			t.Errorf("waitpoints %v", m)
		}
		var bindings []map[string]string
		if err := json.Unmarshal([]byte(f.hgetall(k.SuspensionCurrent())["additional_waitpoints_json"]), &bindings); err != nil ||
			len(bindings) != 2 || bindings[0]["waitpoint_id"] != x1 || bindings[1]["waitpoint_key"] != "k-x2" {
			t.Errorf("additional_waitpoints_json %v %v", bindings, err)
		}
	})

	t.Run("ClosedPreviousSuspensionIsArchived", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		k := model.KeysFor(eid)
		f.hset(k.SuspensionCurrent(), "suspension_id", "old", "waitpoint_id", "old-wp", "closed_at", "1")
		p := f.suspendParams(eid, cl)
		f.suspend(p)
		if !f.sismember(k.Waitpoints(), "old-wp") {
			t.Error("old waitpoint not archived")
		}
		if f.hgetall(k.SuspensionCurrent())["suspension_id"] != p.SuspensionID {
			t.Error("suspension record not replaced")
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			code  valkey.ErrorCode
			setup func(f *suspFix, eid model.ExecutionID, c *valkey.Call)
		}{
			{"NotFound", valkey.CodeExecutionNotFound, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.del(model.KeysFor(eid).Core())
			}},
			{"FenceRequired", valkey.CodeFenceRequired, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[2], c.Args[3], c.Args[4] = "", "", ""
			}},
			{"PartialFence", valkey.CodePartialFenceTriple, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[3] = ""
			}},
			{"StaleLease", valkey.CodeStaleLease, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[3] = "other-lease"
			}},
			{"LeaseRevoked", valkey.CodeLeaseRevoked, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "ownership_state", "lease_revoked")
			}},
			{"LeaseExpired", valkey.CodeLeaseExpired, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "lease_expires_at", "1")
			}},
			{"NotActive", valkey.CodeExecutionNotActive, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "lifecycle_phase", "runnable")
			}},
			{"AttemptMismatch", valkey.CodeInvalidLeaseForSuspend, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[1] = "7"
			}},
			{"AlreadySuspended", valkey.CodeAlreadySuspended, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).SuspensionCurrent(), "suspension_id", "s", "closed_at", "")
			}},
			{"SecretNotInitialized", valkey.CodeHMACSecretNotInitialized, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.del(model.KeysOn(eid.Partition()).WaitpointHMACSecrets())
			}},
			{"InvalidSecret", valkey.CodeInvalidSecret, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysOn(eid.Partition()).WaitpointHMACSecrets(), "secret:k1", "zz")
			}},
			{"MissingHMACKey", valkey.CodeInvalidKeysMissingHMAC, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Keys[16] = ""
			}},
			{"MalformedExtra", valkey.CodeAdditionalWaitpointMalformed, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[19] = "1"
				c.Args = append(c.Args, "", "key")
				c.Keys = append(c.Keys, "a", "b", "c")
			}},
			{"ExtraWithoutKeys", valkey.CodeAdditionalWaitpointMalformed, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[19] = "1"
				c.Args = append(c.Args, "id", "key")
			}},
			{"BadConditionJSON", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[11] = "{not json"
			}},
			{"NonNumericTimeout", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[10] = "soon"
			}},
			{"NonNumericExtraCount", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[19] = "two"
			}},
			{"WrongArity", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Keys = c.Keys[:5]
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := setupSusp(t)
				eid, cl := f.active()
				call := f.suspendParams(eid, cl).Call(0)
				tc.setup(f, eid, &call)
				_, err := f.fcall(call)
				suspWantCode(t, err, tc.code)
				if tc.code != valkey.CodeExecutionNotFound && tc.code != valkey.CodeLeaseExpired &&
					tc.code != valkey.CodeExecutionNotActive {
					if ph := f.hgetall(model.KeysFor(eid).Core())["lifecycle_phase"]; ph != "active" {
						t.Errorf("phase %s after %s", ph, tc.code)
					}
				}
			})
		}
	})

	t.Run("LeaseExpiredMarksExpired", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		f.hset(model.KeysFor(eid).Core(), "lease_expires_at", "1")
		_, err := f.c.SuspendExecution(f.ctx, f.suspendParams(eid, cl))
		suspWantCode(t, err, valkey.CodeLeaseExpired)
		suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{
			"ownership_state": "lease_expired_reclaimable", "lifecycle_phase": "active"})
	})
}

// pending creates a pending waitpoint on an active execution.
func (f *suspFix) pending(eid model.ExecutionID, cl *valkey.ClaimResult) *valkey.WaitpointGrant {
	f.t.Helper()
	g, err := f.c.CreatePendingWaitpoint(f.ctx, &valkey.CreatePendingWaitpointParams{
		ExecutionID: eid, AttemptIndex: cl.AttemptIndex, WaitpointID: model.NewUUID().String(),
		WaitpointKey: "pending-key", ExpiresAt: f.now() + 60_000})
	if err != nil {
		f.t.Fatalf("CreatePendingWaitpoint: %v", err)
	}
	return g
}

func TestSuspendOnPendingWaitpoint(t *testing.T) {
	t.Parallel()

	t.Run("ActivatesWithSameToken", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		g := f.pending(eid, cl)
		p := f.suspendParams(eid, cl)
		p.WaitpointID, p.WaitpointKey, p.UsePendingWaitpoint = g.WaitpointID, "", true
		res := f.suspend(p)
		if res.AlreadySatisfied || res.Waitpoint != *g {
			t.Fatalf("reply %+v, pending %+v", res, g)
		}
		pk := model.KeysOn(eid.Partition())
		suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(g.WaitpointID)), map[string]string{
			"state": "active", "suspension_id": p.SuspensionID, "expires_at": "", "waitpoint_key": "pending-key"})
		if _, ok := f.zscore(pk.PendingWaitpointExpiry(), g.WaitpointID); ok {
			t.Error("still in pending expiry index")
		}
		suspWantFields(t, "suspension", f.hgetall(model.KeysFor(eid).SuspensionCurrent()),
			map[string]string{"waitpoint_key": "pending-key"})
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			code  valkey.ErrorCode
			setup func(f *suspFix, wpKey string)
		}{
			{"NotFound", valkey.CodeWaitpointNotFound, func(f *suspFix, k string) { f.del(k) }},
			{"NotPending", valkey.CodeWaitpointNotPending, func(f *suspFix, k string) { f.hset(k, "state", "closed") }},
			{"OtherExecution", valkey.CodeInvalidWaitpointForExecution, func(f *suspFix, k string) { f.hset(k, "execution_id", "x") }},
			{"OtherAttempt", valkey.CodeInvalidWaitpointForExecution, func(f *suspFix, k string) { f.hset(k, "attempt_index", "3") }},
			{"Expired", valkey.CodePendingWaitpointExpired, func(f *suspFix, k string) { f.hset(k, "expires_at", "1") }},
			{"NoToken", valkey.CodeWaitpointNotTokenBound, func(f *suspFix, k string) { f.hset(k, "waitpoint_token", "") }},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := setupSusp(t)
				eid, cl := f.active()
				g := f.pending(eid, cl)
				tc.setup(f, model.KeysOn(eid.Partition()).Waitpoint(g.WaitpointID))
				p := f.suspendParams(eid, cl)
				p.WaitpointID, p.WaitpointKey, p.UsePendingWaitpoint = g.WaitpointID, "", true
				_, err := f.c.SuspendExecution(f.ctx, p)
				suspWantCode(t, err, tc.code)
				suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{"lifecycle_phase": "active"})
			})
		}
	})

	t.Run("ExtrasUnsupported", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		g := f.pending(eid, cl)
		p := f.suspendParams(eid, cl)
		p.WaitpointID, p.WaitpointKey, p.UsePendingWaitpoint = g.WaitpointID, "", true
		p.Extra = []valkey.WaitpointBinding{{WaitpointID: "x", WaitpointKey: "y"}}
		_, err := f.c.SuspendExecution(f.ctx, p)
		suspWantCode(t, err, valkey.CodeUsePendingWithExtrasUnsupported)
		// The pending waitpoint was activated before the refusal (no rollback).
		suspWantFields(t, "waitpoint", f.hgetall(model.KeysOn(eid.Partition()).Waitpoint(g.WaitpointID)),
			map[string]string{"state": "active"})
		suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{"lifecycle_phase": "active"})
	})
}

func TestCreatePendingWaitpoint(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		exp := f.now() + 60_000
		wpID := model.NewUUID().String()
		g, err := f.c.CreatePendingWaitpoint(f.ctx, &valkey.CreatePendingWaitpointParams{
			ExecutionID: eid, AttemptIndex: cl.AttemptIndex, WaitpointID: wpID, WaitpointKey: "pk", ExpiresAt: exp})
		if err != nil || g.WaitpointID != wpID || g.WaitpointKey != "pk" {
			t.Fatalf("%+v %v", g, err)
		}
		pk := model.KeysOn(eid.Partition())
		wp := f.hgetall(pk.Waitpoint(wpID))
		if g.Token != goToken("k1", testSecret, wpID, "pk", wp["created_at"]) {
			t.Errorf("token %s", g.Token)
		}
		suspWantFields(t, "waitpoint", wp, map[string]string{"waitpoint_id": wpID, "execution_id": string(eid),
			"attempt_index": "0", "suspension_id": "", "waitpoint_key": "pk", "waitpoint_token": g.Token,
			"state": "pending", "activated_at": "", "satisfied_at": "", "closed_at": "", "close_reason": "",
			"expires_at": strconv.FormatInt(exp, 10), "signal_count": "0", "matched_signal_count": "0",
			"last_signal_at": ""})
		if s, ok := f.zscore(pk.PendingWaitpointExpiry(), wpID); !ok || int64(s) != exp {
			t.Errorf("expiry score %v %v", s, ok)
		}
		// A closed waitpoint with the same id may be overwritten.
		f.hset(pk.Waitpoint(wpID), "state", "closed")
		if _, err := f.c.CreatePendingWaitpoint(f.ctx, &valkey.CreatePendingWaitpointParams{
			ExecutionID: eid, AttemptIndex: cl.AttemptIndex, WaitpointID: wpID, WaitpointKey: "pk", ExpiresAt: exp}); err != nil {
			t.Fatalf("overwrite closed: %v", err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			code  valkey.ErrorCode
			setup func(f *suspFix, eid model.ExecutionID, c *valkey.Call)
		}{
			{"NotFound", valkey.CodeExecutionNotFound, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.del(model.KeysFor(eid).Core())
			}},
			{"NotActive", valkey.CodeExecutionNotActive, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "lifecycle_phase", "runnable")
			}},
			{"NoLease", valkey.CodeNoActiveLease, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "ownership_state", "lease_expired_reclaimable")
			}},
			{"AttemptMismatch", valkey.CodeStaleLease, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[1] = "2"
			}},
			{"Exists", valkey.CodeWaitpointAlreadyExists, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.hset(c.Keys[1], "state", "active")
			}},
			{"NonNumericExpiry", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args[4] = "later"
			}},
			{"NoKeystore", valkey.CodeHMACSecretNotInitialized, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				f.del(c.Keys[3])
			}},
			{"WrongArity", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
				c.Args = c.Args[:3]
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := setupSusp(t)
				eid, cl := f.active()
				call := (&valkey.CreatePendingWaitpointParams{ExecutionID: eid, AttemptIndex: cl.AttemptIndex,
					WaitpointID: model.NewUUID().String(), WaitpointKey: "k", ExpiresAt: f.now() + 1000}).Call()
				tc.setup(f, eid, &call)
				_, err := f.fcall(call)
				suspWantCode(t, err, tc.code)
				if tc.code != valkey.CodeWaitpointAlreadyExists && len(call.Keys) > 1 && f.exists(call.Keys[1]) {
					t.Error("waitpoint written on error")
				}
			})
		}
	})
}

func TestResumeExecution(t *testing.T) {
	t.Parallel()

	t.Run("Eligible", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, p, _ := f.suspended()
		st, err := f.c.ResumeExecution(f.ctx, &valkey.ResumeParams{ExecutionID: eid})
		if err != nil || st != "waiting" {
			t.Fatalf("%q %v", st, err)
		}
		k, pk := model.KeysFor(eid), model.KeysOn(eid.Partition())
		core := f.hgetall(k.Core())
		suspWantFields(t, "core", core, map[string]string{"lifecycle_phase": "runnable", "ownership_state": "unowned",
			"eligibility_state": "eligible_now", "blocking_reason": "waiting_for_worker", "blocking_detail": "",
			"attempt_state": "attempt_interrupted", "public_state": "waiting", "current_suspension_id": "",
			"current_waitpoint_id": ""})
		created, _ := strconv.ParseFloat(core["created_at"], 64)
		if s, ok := f.zscore(pk.LaneEligible("default"), string(eid)); !ok || s != created {
			t.Errorf("eligible score %v %v want %v", s, ok, created)
		}
		if _, ok := f.zscore(pk.LaneSuspended("default"), string(eid)); ok {
			t.Error("still suspended-indexed")
		}
		suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(p.WaitpointID)), map[string]string{
			"state": "closed", "close_reason": "resumed", "closed_at": core["last_transition_at"],
			"satisfied_at": core["last_transition_at"]})
		suspWantFields(t, "suspension", f.hgetall(k.SuspensionCurrent()), map[string]string{
			"close_reason": "resumed", "closed_at": core["last_transition_at"]})
		// A second resume finds nothing open.
		_, err = f.c.ResumeExecution(f.ctx, &valkey.ResumeParams{ExecutionID: eid})
		suspWantCode(t, err, valkey.CodeExecutionNotSuspended)
	})

	t.Run("Delayed", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, _, _ := f.suspended()
		before := f.now()
		st, err := f.c.ResumeExecution(f.ctx, &valkey.ResumeParams{ExecutionID: eid, ResumeDelayMs: 5000})
		if err != nil || st != "delayed" {
			t.Fatalf("%q %v", st, err)
		}
		suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{
			"eligibility_state": "not_eligible_until_time", "blocking_reason": "waiting_for_resume_delay",
			"blocking_detail": "resume delay 5000ms", "public_state": "delayed"})
		if s, ok := f.zscore(model.KeysOn(eid.Partition()).LaneDelayed("default"), string(eid)); !ok || int64(s) < before+5000 {
			t.Errorf("delayed score %v %v", s, ok)
		}
	})

	t.Run("ClosesExtras", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		p := f.suspendParams(eid, cl)
		p.Extra = []valkey.WaitpointBinding{{WaitpointID: "x-1", WaitpointKey: "kx"}}
		f.suspend(p)
		if _, err := f.c.ResumeExecution(f.ctx, &valkey.ResumeParams{ExecutionID: eid}); err != nil {
			t.Fatal(err)
		}
		pk := model.KeysOn(eid.Partition())
		suspWantFields(t, "extra", f.hgetall(pk.Waitpoint("x-1")), map[string]string{"state": "closed", "close_reason": "resumed"})
		suspWantFields(t, "extra condition", f.hgetall(pk.WaitpointCondition("x-1")), map[string]string{"closed": "1", "closed_reason": "resumed"})
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		_, err := f.c.ResumeExecution(f.ctx, &valkey.ResumeParams{ExecutionID: eid})
		suspWantCode(t, err, valkey.CodeExecutionNotSuspended)
		_, err = f.c.ResumeExecution(f.ctx, &valkey.ResumeParams{ExecutionID: f.eid()})
		suspWantCode(t, err, valkey.CodeExecutionNotFound)
		f.suspend(f.suspendParams(eid, cl))
		call := (&valkey.ResumeParams{ExecutionID: eid, Lane: "default", WaitpointID: "w"}).Call()
		call.Args[2] = "soon"
		_, err = f.fcall(call)
		suspWantCode(t, err, valkey.CodeInvalidInput)
		f.hset(model.KeysFor(eid).SuspensionCurrent(), "closed_at", "5")
		_, err = f.fcall((&valkey.ResumeParams{ExecutionID: eid, Lane: "default", WaitpointID: "w"}).Call())
		suspWantCode(t, err, valkey.CodeExecutionNotSuspended)
		suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{"lifecycle_phase": "suspended"})
	})
}

func TestExpireSuspension(t *testing.T) {
	t.Parallel()

	// due suspends an execution whose timeout has already passed.
	due := func(f *suspFix, behavior string) (model.ExecutionID, *valkey.SuspendParams) {
		eid, cl := f.active()
		p := f.suspendParams(eid, cl)
		p.TimeoutAt = f.now() - 1000
		p.TimeoutBehavior = behavior
		p.Extra = []valkey.WaitpointBinding{{WaitpointID: "x-" + behavior, WaitpointKey: "kx"}}
		f.suspend(p)
		return eid, p
	}

	for _, tc := range []struct{ behavior, outcome, attempt string }{
		{"fail", "failed", "ended_failure"}, {"cancel", "cancelled", "ended_cancelled"}, {"expire", "expired", "ended_failure"},
	} {
		t.Run("Terminal_"+tc.behavior, func(t *testing.T) {
			t.Parallel()
			f := setupSusp(t)
			eid, p := due(f, tc.behavior)
			k, pk := model.KeysFor(eid), model.KeysOn(eid.Partition())
			f.hset(k.StreamMeta(0), "closed_at", "")
			res, err := f.c.ExpireSuspension(f.ctx, eid)
			if err != nil || res.Outcome != tc.behavior || res.PublicState != tc.outcome {
				t.Fatalf("%+v %v", res, err)
			}
			reason := "timed_out_" + tc.behavior
			core := f.hgetall(k.Core())
			suspWantFields(t, "core", core, map[string]string{"lifecycle_phase": "terminal", "terminal_outcome": tc.outcome,
				"public_state": tc.outcome, "attempt_state": "attempt_terminal",
				"failure_reason": "suspension_timeout:" + tc.behavior, "current_suspension_id": "",
				"completed_at": core["last_transition_at"]})
			suspWantFields(t, "attempt", f.hgetall(k.Attempt(0)), map[string]string{"attempt_state": tc.attempt,
				"suspended_at": "", "suspension_id": "", "failure_reason": "suspension_timeout:" + tc.behavior})
			suspWantFields(t, "stream meta", f.hgetall(k.StreamMeta(0)), map[string]string{"closed_reason": "suspension_timeout"})
			suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(p.WaitpointID)), map[string]string{"state": "closed", "close_reason": reason})
			suspWantFields(t, "condition", f.hgetall(pk.WaitpointCondition(p.WaitpointID)), map[string]string{"closed": "1", "closed_reason": reason})
			suspWantFields(t, "suspension", f.hgetall(k.SuspensionCurrent()), map[string]string{"close_reason": reason})
			suspWantFields(t, "extra", f.hgetall(pk.Waitpoint("x-"+tc.behavior)), map[string]string{"state": "closed", "close_reason": reason})
			if _, ok := f.zscore(pk.LaneTerminal("default"), string(eid)); !ok {
				t.Error("not terminal-indexed")
			}
			for _, key := range []string{pk.LaneSuspended("default"), pk.SuspensionTimeout()} {
				if _, ok := f.zscore(key, string(eid)); ok {
					t.Errorf("still in %s", key)
				}
			}
		})
	}

	t.Run("AutoResume", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, p := due(f, "auto_resume_with_timeout_signal")
		res, err := f.c.ExpireSuspension(f.ctx, eid)
		if err != nil || res.Outcome != "auto_resume" || res.PublicState != "waiting" {
			t.Fatalf("%+v %v", res, err)
		}
		pk := model.KeysOn(eid.Partition())
		suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{"lifecycle_phase": "runnable",
			"public_state": "waiting", "eligibility_state": "eligible_now"})
		suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(p.WaitpointID)), map[string]string{"close_reason": "timed_out_auto_resume"})
		if _, ok := f.zscore(pk.LaneEligible("default"), string(eid)); !ok {
			t.Error("not eligible")
		}
	})

	t.Run("Escalate", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, p := due(f, "escalate")
		res, err := f.c.ExpireSuspension(f.ctx, eid)
		if err != nil || res.Outcome != "escalate" || res.PublicState != "suspended" {
			t.Fatalf("%+v %v", res, err)
		}
		k, pk := model.KeysFor(eid), model.KeysOn(eid.Partition())
		suspWantFields(t, "core", f.hgetall(k.Core()), map[string]string{"lifecycle_phase": "suspended",
			"blocking_reason": "paused_by_operator",
			"blocking_detail": "suspension escalated: timeout at " + strconv.FormatInt(p.TimeoutAt, 10)})
		suspWantFields(t, "suspension", f.hgetall(k.SuspensionCurrent()), map[string]string{
			"reason_code": "waiting_for_operator_review", "timeout_at": "", "timeout_behavior": "", "closed_at": ""})
		if _, ok := f.zscore(pk.SuspensionTimeout(), string(eid)); ok {
			t.Error("still in suspension_timeout")
		}
		if s, _ := f.zscore(pk.LaneSuspended("default"), string(eid)); int64(s) != p.TimeoutAt {
			t.Errorf("suspended score changed: %v", s)
		}
		res, _ = f.c.ExpireSuspension(f.ctx, eid)
		if res.Outcome != "not_yet_due" {
			t.Errorf("after escalation: %+v", res)
		}
	})

	t.Run("Cleanups", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		ghost := f.eid()
		pk := model.KeysOn(ghost.Partition())
		f.zadd(pk.SuspensionTimeout(), 1, string(ghost))
		if res, err := f.c.ExpireSuspension(f.ctx, ghost); err != nil || res.Outcome != "not_found_cleaned" {
			t.Fatalf("%+v %v", res, err)
		}
		if _, ok := f.zscore(pk.SuspensionTimeout(), string(ghost)); ok {
			t.Error("ghost not removed")
		}
		eid, cl := f.active()
		if res, _ := f.c.ExpireSuspension(f.ctx, eid); res.Outcome != "not_suspended_cleaned" {
			t.Errorf("active: %+v", res)
		}
		p := f.suspendParams(eid, cl)
		p.TimeoutAt = f.now() + 3_600_000
		f.suspend(p)
		if res, _ := f.c.ExpireSuspension(f.ctx, eid); res.Outcome != "not_yet_due" {
			t.Errorf("future: %+v", res)
		}
		f.hset(model.KeysFor(eid).SuspensionCurrent(), "closed_at", "9")
		if res, _ := f.c.ExpireSuspension(f.ctx, eid); res.Outcome != "no_active_suspension_cleaned" {
			t.Errorf("closed: %+v", res)
		}
	})
}

func (f *suspFix) zadd(key string, score float64, member string) {
	f.t.Helper()
	if err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Zadd().Key(key).ScoreMember().ScoreMember(score, member).Build()).Error(); err != nil {
		f.t.Fatal(err)
	}
}

func TestCloseWaitpoint(t *testing.T) {
	t.Parallel()
	f := setupSusp(t)
	eid, cl := f.active()
	g := f.pending(eid, cl)
	pk := model.KeysOn(eid.Partition())
	already, err := f.c.CloseWaitpoint(f.ctx, eid, g.WaitpointID, "never_committed")
	if err != nil || already {
		t.Fatalf("%v %v", already, err)
	}
	suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(g.WaitpointID)), map[string]string{
		"state": "closed", "close_reason": "never_committed"})
	if _, ok := f.zscore(pk.PendingWaitpointExpiry(), g.WaitpointID); ok {
		t.Error("still in pending expiry")
	}
	if already, err := f.c.CloseWaitpoint(f.ctx, eid, g.WaitpointID, ""); err != nil || !already {
		t.Errorf("second close %v %v", already, err)
	}
	_, err = f.c.CloseWaitpoint(f.ctx, eid, "nope", "")
	suspWantCode(t, err, valkey.CodeWaitpointNotFound)
	f.hset(pk.Waitpoint("odd"), "state", "weird")
	_, err = f.c.CloseWaitpoint(f.ctx, eid, "odd", "")
	suspWantCode(t, err, valkey.CodeWaitpointNotOpen)
}

func TestWaitpointHMACKeystore(t *testing.T) {
	t.Parallel()
	part := model.Partition{Family: model.FamilyFlow, Index: 3}
	key := model.KeysOn(part).WaitpointHMACSecrets()

	t.Run("RotateAndList", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		r, err := f.c.RotateWaitpointHMACSecret(f.ctx, part, "k1", "aa", 0)
		if err != nil || *r != (valkey.RotateHMACResult{Outcome: "rotated", NewKid: "k1", GCCount: 0}) {
			t.Fatalf("first rotation %+v %v", r, err)
		}
		if h := f.hgetall(key); len(h) != 2 || h["current_kid"] != "k1" || h["secret:k1"] != "aa" {
			t.Fatalf("keystore %v", h)
		}
		if r, err := f.c.RotateWaitpointHMACSecret(f.ctx, part, "k1", "aa", 0); err != nil || r.Outcome != "noop" || r.NewKid != "k1" {
			t.Fatalf("replay %+v %v", r, err)
		}
		_, err = f.c.RotateWaitpointHMACSecret(f.ctx, part, "k1", "bb", 0)
		if le := suspWantCode(t, err, valkey.CodeRotationConflict); le.Detail(0) != "k1" {
			t.Errorf("detail %v", le.Details)
		}
		before := f.now()
		r, err = f.c.RotateWaitpointHMACSecret(f.ctx, part, "k2", "bb", 60_000)
		if err != nil || r.Outcome != "rotated" || r.PreviousKid != "k1" || r.NewKid != "k2" {
			t.Fatalf("rotation %+v %v", r, err)
		}
		h := f.hgetall(key)
		exp, _ := strconv.ParseInt(h["expires_at:k1"], 10, 64)
		if h["current_kid"] != "k2" || h["previous_kid"] != "k1" || h["previous_expires_at"] != h["expires_at:k1"] ||
			exp < before+60_000 || h["secret:k2"] != "bb" || h["expires_at:k2"] != "" {
			t.Fatalf("keystore %v", h)
		}
		l, err := f.c.ListWaitpointHMACKids(f.ctx, part)
		if err != nil || l.CurrentKid != "k2" || len(l.Verifying) != 1 || l.Verifying[0] != (valkey.HMACKid{Kid: "k1", ExpiresAt: exp}) {
			t.Fatalf("list %+v %v", l, err)
		}
		// k1's grace runs out; the next rotation reaps it.
		f.hset(key, "expires_at:k1", "5", "expires_at:ghost", "junk", "secret:ghost", "cc")
		if l, _ := f.c.ListWaitpointHMACKids(f.ctx, part); len(l.Verifying) != 0 {
			t.Fatalf("expired kids listed %+v", l)
		}
		r, err = f.c.RotateWaitpointHMACSecret(f.ctx, part, "k3", "cc", 1000)
		if err != nil || r.GCCount != 2 || r.PreviousKid != "k2" {
			t.Fatalf("gc rotation %+v %v", r, err)
		}
		h = f.hgetall(key)
		for _, gone := range []string{"secret:k1", "expires_at:k1", "secret:ghost", "expires_at:ghost"} {
			if _, ok := h[gone]; ok {
				t.Errorf("%s not collected", gone)
			}
		}
		if h["secret:k2"] != "bb" || h["expires_at:k2"] == "" {
			t.Errorf("k2 not kept in grace: %v", h)
		}
	})

	t.Run("TornWriteRepair", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		f.hset(key, "current_kid", "k9")
		if r, err := f.c.RotateWaitpointHMACSecret(f.ctx, part, "k9", "abcd", 0); err != nil || r.Outcome != "noop" {
			t.Fatalf("%+v %v", r, err)
		}
		if f.hgetall(key)["secret:k9"] != "abcd" {
			t.Error("secret not repaired")
		}
	})

	t.Run("ListEmpty", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		l, err := f.c.ListWaitpointHMACKids(f.ctx, part)
		if err != nil || l.CurrentKid != "" || len(l.Verifying) != 0 {
			t.Fatalf("%+v %v", l, err)
		}
	})

	t.Run("Validation", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		cases := []struct {
			kid, secret, grace string
			code               valkey.ErrorCode
		}{
			{"", "aa", "0", valkey.CodeInvalidKid},
			{"a:b", "aa", "0", valkey.CodeInvalidKid},
			{"k", "", "0", valkey.CodeInvalidSecretHex},
			{"k", "abc", "0", valkey.CodeInvalidSecretHex},
			{"k", "zz", "0", valkey.CodeInvalidSecretHex},
			{"k", "aa", "-1", valkey.CodeInvalidGraceMs},
			{"k", "aa", "1.5", valkey.CodeInvalidGraceMs},
			{"k", "aa", "nan", valkey.CodeInvalidGraceMs},
			{"k", "aa", "9007199254740992", valkey.CodeInvalidGraceMs},
			{"k", "aa", "soon", valkey.CodeInvalidGraceMs},
		}
		for _, tc := range cases {
			_, err := f.c.FCall(f.ctx, "ff_rotate_waitpoint_hmac_secret", []string{key}, []string{tc.kid, tc.secret, tc.grace})
			suspWantCode(t, err, tc.code)
		}
		_, err := f.c.FCall(f.ctx, "ff_rotate_waitpoint_hmac_secret", []string{key}, nil)
		suspWantCode(t, err, valkey.CodeInvalidKid)
		if f.exists(key) {
			t.Error("keystore written by a refused rotation")
		}
	})

	t.Run("Install", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		p0 := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 0}).WaitpointHMACSecrets()
		p1 := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 1}).WaitpointHMACSecrets()
		p2 := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 2}).WaitpointHMACSecrets()
		f.hset(p1, "current_kid", "k7")                      // torn write
		f.hset(p2, "current_kid", "k8", "secret:k8", "beef") // differs; kept
		if err := f.c.InstallWaitpointHMACSecret(f.ctx, "c0ffee"); err != nil {
			t.Fatal(err)
		}
		if h := f.hgetall(p0); h["current_kid"] != "k1" || h["secret:k1"] != "c0ffee" {
			t.Errorf("fresh %v", h)
		}
		if h := f.hgetall(p1); h["current_kid"] != "k7" || h["secret:k7"] != "c0ffee" {
			t.Errorf("repaired %v", h)
		}
		if h := f.hgetall(p2); h["secret:k8"] != "beef" || len(h) != 2 {
			t.Errorf("kept %v", h)
		}
		last := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: 255}).WaitpointHMACSecrets()
		if !f.exists(last) {
			t.Error("last partition not installed")
		}
		if err := f.c.InstallWaitpointHMACSecret(f.ctx, "xyz"); err == nil {
			t.Error("bad hex accepted")
		}
	})
}
