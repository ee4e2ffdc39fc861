package valkey_test

import (
	"encoding/json"
	"sort"
	"strconv"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// signal builds deliver params for the suspension's primary waitpoint.
func signalFor(eid model.ExecutionID, g valkey.WaitpointGrant, name string) *valkey.SignalParams {
	return &valkey.SignalParams{
		SignalID: model.NewUUID().String(), ExecutionID: eid, WaitpointID: g.WaitpointID,
		SignalName: name, SignalCategory: "external", SourceType: "webhook", SourceIdentity: "src-1",
		Payload: `{"ok":true}`, WaitpointToken: g.Token,
	}
}

func (f *suspFix) deliver(p *valkey.SignalParams) *valkey.SignalResult {
	f.t.Helper()
	res, err := f.c.DeliverSignal(f.ctx, p)
	if err != nil {
		f.t.Fatalf("DeliverSignal %s: %v", p.SignalName, err)
	}
	return res
}

// snapshot captures what a refused signal must leave untouched.
func (f *suspFix) snapshot(eid model.ExecutionID, wp string) map[string]any {
	k, pk := model.KeysFor(eid), model.KeysOn(eid.Partition())
	core := f.hgetall(k.Core())
	delete(core, "last_hmac_validation_failed_at")
	return map[string]any{
		"core": core, "wp": f.hgetall(pk.Waitpoint(wp)), "cond": f.hgetall(pk.WaitpointCondition(wp)),
		"susp": f.hgetall(k.SuspensionCurrent()), "signals": f.smembersZ(k.Signals()),
		"stream": len(f.xrange(pk.WaitpointSignals(wp))), "delivery": len(f.xrange(pk.SignalDelivery())),
	}
}

func (f *suspFix) smembersZ(key string) []string {
	f.t.Helper()
	m, err := f.c.Raw().Do(f.ctx, f.c.Raw().B().Zrange().Key(key).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestSignalLifecycle drives create → claim → suspend → deliver (valid
// token) → claim_resumed → complete, and the refused variants.
func TestSignalLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("ValidTokenResumesAndCompletes", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		res := f.suspend(sp)
		sig := signalFor(eid, res.Waitpoint, "approve")
		sig.CorrelationID, sig.IdempotencyKey = "corr", "once"
		out := f.deliver(sig)
		if out.Duplicate || out.SignalID != sig.SignalID || out.Effect != "resume_condition_satisfied" {
			t.Fatalf("deliver %+v", out)
		}
		k, pk := model.KeysFor(eid), model.KeysOn(eid.Partition())
		core := f.hgetall(k.Core())
		now := core["last_transition_at"]
		suspWantFields(t, "core", core, map[string]string{"lifecycle_phase": "runnable", "public_state": "waiting",
			"eligibility_state": "eligible_now", "blocking_reason": "waiting_for_worker",
			"attempt_state": "attempt_interrupted", "current_waitpoint_id": "", "current_suspension_id": ""})
		if _, ok := f.zscore(pk.LaneEligible("default"), string(eid)); !ok {
			t.Error("not eligible after resume")
		}
		suspWantFields(t, "signal", f.hgetall(pk.Signal(sig.SignalID)), map[string]string{
			"signal_id": sig.SignalID, "target_execution_id": string(eid), "target_waitpoint_id": sp.WaitpointID,
			"target_scope": "waitpoint", "signal_name": "approve", "signal_category": "external",
			"source_type": "webhook", "source_identity": "src-1", "correlation_id": "corr",
			"idempotency_key": "once", "created_at": now, "accepted_at": now,
			"matched_waitpoint_id": sp.WaitpointID, "payload_encoding": "json",
			"observed_effect": "resume_condition_satisfied"})
		if v, _ := f.get(pk.SignalPayload(sig.SignalID)); v != `{"ok":true}` {
			t.Errorf("payload %q", v)
		}
		if v, _ := f.get(pk.SignalDedup(sp.WaitpointID, "once")); v != sig.SignalID {
			t.Errorf("dedup %q", v)
		}
		if ttl := f.pttl(pk.SignalDedup(sp.WaitpointID, "once")); ttl <= 86_000_000 {
			t.Errorf("dedup ttl %d", ttl)
		}
		st := f.xrange(pk.WaitpointSignals(sp.WaitpointID))
		if len(st) != 1 {
			t.Fatalf("waitpoint stream %v", st)
		}
		suspWantFields(t, "wp stream", st[0], map[string]string{"signal_id": sig.SignalID, "signal_name": "approve",
			"signal_category": "external", "source_type": "webhook", "source_identity": "src-1",
			"matched": "0", "accepted_at": now})
		if s, ok := f.zscore(k.Signals(), sig.SignalID); !ok || strconv.FormatFloat(s, 'f', -1, 64) != now {
			t.Errorf("exec signals %v %v", s, ok)
		}
		suspWantFields(t, "condition", f.hgetall(pk.WaitpointCondition(sp.WaitpointID)), map[string]string{
			"matcher:0:satisfied": "1", "matcher:0:signal_id": sig.SignalID, "satisfied_count": "1",
			"closed": "1", "closed_at": now, "closed_reason": "satisfied"})
		suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(sp.WaitpointID)), map[string]string{
			"state": "closed", "satisfied_at": now, "closed_at": now, "close_reason": "resumed",
			"signal_count": "1", "matched_signal_count": "1", "last_signal_at": now})
		suspWantFields(t, "suspension", f.hgetall(k.SuspensionCurrent()), map[string]string{
			"satisfied_at": now, "closed_at": now, "close_reason": "resumed", "last_signal_at": now})
		if _, ok := f.zscore(pk.SuspensionTimeout(), string(eid)); ok {
			t.Error("still in suspension_timeout")
		}
		del := f.xrange(pk.SignalDelivery())
		if len(del) != 1 {
			t.Fatalf("delivery stream %v", del)
		}
		suspWantFields(t, "delivery", del[0], map[string]string{"signal_id": sig.SignalID, "execution_id": string(eid),
			"waitpoint_id": sp.WaitpointID, "source_identity": "src-1", "effect": "resume_condition_satisfied",
			"delivered_at_ms": now})

		// A fresh claim is refused: the interrupted attempt must be resumed.
		f.grant(eid)
		_, err := f.c.ClaimExecution(f.ctx, f.claimParams(eid))
		suspWantCode(t, err, valkey.CodeUseClaimResumedExecution)
		cr, err := f.c.ClaimResumedExecution(f.ctx, &valkey.ClaimResumedParams{ExecutionID: eid, WorkerID: "w1",
			WorkerInstanceID: "wi1", Lane: "default", LeaseID: "L2", LeaseTTLMs: 30_000, RemainingAttemptTimeoutMs: 10_000})
		if err != nil || cr.LeaseID != "L2" || cr.LeaseEpoch != 2 || cr.AttemptID != cl.AttemptID || cr.AttemptIndex != 0 {
			t.Fatalf("claim resumed %+v %v", cr, err)
		}
		core = f.hgetall(k.Core())
		acq, _ := strconv.ParseInt(core["lease_acquired_at"], 10, 64)
		suspWantFields(t, "core", core, map[string]string{"lifecycle_phase": "active", "ownership_state": "leased",
			"attempt_state": "running_attempt", "public_state": "active", "current_lease_id": "L2",
			"current_lease_epoch": "2", "current_worker_id": "w1", "current_worker_instance_id": "wi1",
			"current_lane": "default", "current_attempt_id": cl.AttemptID, "total_attempt_count": "1",
			"lease_expires_at":       strconv.FormatInt(cr.ExpiresAt, 10),
			"lease_renewal_deadline": strconv.FormatInt(acq+20_000, 10)})
		suspWantFields(t, "attempt", f.hgetall(k.Attempt(0)), map[string]string{"attempt_state": "started",
			"lease_id": "L2", "lease_epoch": "2", "suspended_at": "", "suspension_id": "",
			"resumed_at": core["lease_acquired_at"]})
		suspWantFields(t, "lease", f.hgetall(k.LeaseCurrent()), map[string]string{"lease_id": "L2", "lease_epoch": "2",
			"attempt_id": cl.AttemptID, "execution_id": string(eid), "worker_id": "w1"})
		if f.exists(k.ClaimGrant()) {
			t.Error("grant not consumed")
		}
		if s, ok := f.zscore(pk.AttemptTimeout(), string(eid)); !ok || int64(s) != acq+10_000 {
			t.Errorf("attempt timeout %v %v", s, ok)
		}
		if s, ok := f.zscore(pk.LaneActive("default"), string(eid)); !ok || int64(s) != cr.ExpiresAt {
			t.Errorf("active %v %v", s, ok)
		}
		if _, ok := f.zscore(pk.LaneEligible("default"), string(eid)); ok {
			t.Error("still eligible")
		}
		if !f.sismember(pk.WorkerLeases("wi1"), string(eid)) {
			t.Error("not in worker leases")
		}
		h := f.history(eid)
		suspWantFields(t, "acquired", h[len(h)-1], map[string]string{"event": "acquired", "reason": "claim_resumed",
			"lease_id": "L2", "lease_epoch": "2", "attempt_index": "0", "attempt_id": cl.AttemptID})

		if err := f.c.CompleteExecution(f.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid,
			Fence: valkey.LeaseFence{LeaseID: "L2", LeaseEpoch: 2, AttemptID: cl.AttemptID}, Result: "done"}); err != nil {
			t.Fatalf("complete: %v", err)
		}
		suspWantFields(t, "core", f.hgetall(k.Core()), map[string]string{"lifecycle_phase": "terminal",
			"terminal_outcome": "success", "public_state": "completed"})
	})

	// refused suspends, runs mutate on the token or keystore, delivers and
	// expects code with nothing but last_hmac_validation_failed_at changed.
	refused := func(t *testing.T, code valkey.ErrorCode, mutate func(f *suspFix, eid model.ExecutionID, sig *valkey.SignalParams)) {
		t.Helper()
		f := setupSusp(t)
		eid, sp, res := f.suspended()
		sig := signalFor(eid, res.Waitpoint, "approve")
		mutate(f, eid, sig)
		before := f.snapshot(eid, sp.WaitpointID)
		_, err := f.c.DeliverSignal(f.ctx, sig)
		suspWantCode(t, err, code)
		if !sameJSON(before, f.snapshot(eid, sp.WaitpointID)) {
			t.Errorf("state changed:\n%v\n%v", before, f.snapshot(eid, sp.WaitpointID))
		}
		if f.hgetall(model.KeysFor(eid).Core())["last_hmac_validation_failed_at"] == "" {
			t.Error("auth failure not stamped")
		}
		if f.exists(model.KeysOn(eid.Partition()).Signal(sig.SignalID)) {
			t.Error("signal recorded")
		}
	}

	t.Run("ForgedToken", func(t *testing.T) {
		t.Parallel()
		refused(t, valkey.CodeInvalidToken, func(f *suspFix, eid model.ExecutionID, sig *valkey.SignalParams) {
			sig.WaitpointToken = goToken("k1", "deadbeef", sig.WaitpointID, "wpk", "1")
		})
	})
	t.Run("TamperedDigest", func(t *testing.T) {
		t.Parallel()
		refused(t, valkey.CodeInvalidToken, func(f *suspFix, eid model.ExecutionID, sig *valkey.SignalParams) {
			b := []byte(sig.WaitpointToken)
			if b[len(b)-1] == '0' {
				b[len(b)-1] = '1'
			} else {
				b[len(b)-1] = '0'
			}
			sig.WaitpointToken = string(b)
		})
	})
	t.Run("MalformedTokens", func(t *testing.T) {
		t.Parallel()
		for _, tok := range []string{"nocolon", ":" + goToken("", testSecret, "a", "b", "c")[1:], "k1:", "k1:abcd"} {
			refused(t, valkey.CodeInvalidToken, func(f *suspFix, eid model.ExecutionID, sig *valkey.SignalParams) {
				sig.WaitpointToken = tok
			})
		}
	})
	t.Run("MissingToken", func(t *testing.T) {
		t.Parallel()
		refused(t, valkey.CodeMissingToken, func(f *suspFix, eid model.ExecutionID, sig *valkey.SignalParams) {
			sig.WaitpointToken = ""
		})
	})
	t.Run("UnknownKid", func(t *testing.T) {
		t.Parallel()
		refused(t, valkey.CodeInvalidToken, func(f *suspFix, eid model.ExecutionID, sig *valkey.SignalParams) {
			sig.WaitpointToken = "k5" + sig.WaitpointToken[2:]
		})
	})
	t.Run("ExpiredToken", func(t *testing.T) {
		t.Parallel()
		// Rotated out with a grace that has since passed.
		refused(t, valkey.CodeTokenExpired, func(f *suspFix, eid model.ExecutionID, sig *valkey.SignalParams) {
			if _, err := f.c.RotateWaitpointHMACSecret(f.ctx, eid.Partition(), "k2", "abcdef", 60_000); err != nil {
				t.Fatal(err)
			}
			f.hset(model.KeysOn(eid.Partition()).WaitpointHMACSecrets(), "expires_at:k1", strconv.FormatInt(f.now()-1, 10))
		})
	})
	t.Run("KeystoreGone", func(t *testing.T) {
		t.Parallel()
		refused(t, valkey.CodeHMACSecretNotInitialized, func(f *suspFix, eid model.ExecutionID, sig *valkey.SignalParams) {
			f.del(model.KeysOn(eid.Partition()).WaitpointHMACSecrets())
		})
	})
	t.Run("RotatedKidValidWithinGraceThenRefused", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.ResumeConditionJSON = signalCond("all", 1, "a", "b")
		res := f.suspend(sp)
		if _, err := f.c.RotateWaitpointHMACSecret(f.ctx, eid.Partition(), "k2", "abcdef", 60_000); err != nil {
			t.Fatal(err)
		}
		if out := f.deliver(signalFor(eid, res.Waitpoint, "a")); out.Effect != "appended_to_waitpoint" {
			t.Fatalf("in grace: %+v", out)
		}
		// A second rotation keeps k1 in its own grace window.
		if _, err := f.c.RotateWaitpointHMACSecret(f.ctx, eid.Partition(), "k3", "abcdef01", 60_000); err != nil {
			t.Fatal(err)
		}
		f.hset(model.KeysOn(eid.Partition()).WaitpointHMACSecrets(), "expires_at:k1", "1")
		_, err := f.c.DeliverSignal(f.ctx, signalFor(eid, res.Waitpoint, "b"))
		suspWantCode(t, err, valkey.CodeTokenExpired)
		suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{"lifecycle_phase": "suspended"})
	})

	t.Run("DuplicateIdempotencyKey", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.ResumeConditionJSON = signalCond("all", 1, "a", "b")
		res := f.suspend(sp)
		first := signalFor(eid, res.Waitpoint, "a")
		first.IdempotencyKey = "dup"
		if out := f.deliver(first); out.Effect != "appended_to_waitpoint" {
			t.Fatalf("%+v", out)
		}
		again := signalFor(eid, res.Waitpoint, "b")
		again.IdempotencyKey = "dup"
		before := f.snapshot(eid, sp.WaitpointID)
		out := f.deliver(again)
		if !out.Duplicate || out.SignalID != first.SignalID {
			t.Fatalf("duplicate %+v", out)
		}
		if !sameJSON(before, f.snapshot(eid, sp.WaitpointID)) || f.exists(model.KeysOn(eid.Partition()).Signal(again.SignalID)) {
			t.Error("duplicate changed state")
		}
	})
}

func TestDeliverSignal(t *testing.T) {
	t.Parallel()

	t.Run("MatcherEffects", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.ResumeConditionJSON = signalCond("all", 1, "a", "b")
		res := f.suspend(sp)
		pk := model.KeysOn(eid.Partition())
		if out := f.deliver(signalFor(eid, res.Waitpoint, "zzz")); out.Effect != "no_op" {
			t.Errorf("non-matching: %+v", out)
		}
		if out := f.deliver(signalFor(eid, res.Waitpoint, "b")); out.Effect != "appended_to_waitpoint" {
			t.Errorf("first of all: %+v", out)
		}
		suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(sp.WaitpointID)), map[string]string{
			"signal_count": "2", "matched_signal_count": "1", "state": "active"})
		suspWantFields(t, "condition", f.hgetall(pk.WaitpointCondition(sp.WaitpointID)), map[string]string{
			"matcher:1:satisfied": "1", "matcher:0:satisfied": "0", "satisfied_count": "1", "closed": "0"})
		p := signalFor(eid, res.Waitpoint, "a")
		p.ResumeDelayMs = 2500
		if out := f.deliver(p); out.Effect != "resume_condition_satisfied" {
			t.Errorf("last of all: %+v", out)
		}
		suspWantFields(t, "core", f.hgetall(model.KeysFor(eid).Core()), map[string]string{"public_state": "delayed",
			"blocking_reason": "waiting_for_resume_delay", "blocking_detail": "resume delay 2500ms after signal a"})
		if _, ok := f.zscore(pk.LaneDelayed("default"), string(eid)); !ok {
			t.Error("not delayed-indexed")
		}
	})

	t.Run("WildcardAndCount", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.ResumeConditionJSON = signalCond("any", 1)
		res := f.suspend(sp)
		if out := f.deliver(signalFor(eid, res.Waitpoint, "anything")); out.Effect != "resume_condition_satisfied" {
			t.Errorf("wildcard: %+v", out)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			code  valkey.ErrorCode
			setup func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call)
		}{
			{"NotFound", valkey.CodeExecutionNotFound, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.del(model.KeysFor(eid).Core())
			}},
			{"UnknownWaitpointIsInvalidToken", valkey.CodeInvalidToken, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.del(model.KeysOn(eid.Partition()).Waitpoint(wp))
			}},
			{"Terminal", valkey.CodeTargetNotSignalable, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "lifecycle_phase", "terminal")
			}},
			{"RunnableClosedWaitpoint", valkey.CodeTargetNotSignalable, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "lifecycle_phase", "runnable")
				f.hset(model.KeysOn(eid.Partition()).Waitpoint(wp), "state", "closed")
			}},
			{"PendingUseBuffer", valkey.CodeWaitpointPendingUseBuffer, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.hset(model.KeysFor(eid).Core(), "lifecycle_phase", "active")
				f.hset(model.KeysOn(eid.Partition()).Waitpoint(wp), "state", "pending")
			}},
			{"ConditionMissing", valkey.CodeWaitpointNotFound, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.del(model.KeysOn(eid.Partition()).WaitpointCondition(wp))
			}},
			{"ConditionClosed", valkey.CodeWaitpointClosed, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.hset(model.KeysOn(eid.Partition()).WaitpointCondition(wp), "closed", "1")
			}},
			{"SignalLimit", valkey.CodeSignalLimitExceeded, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.zadd(model.KeysFor(eid).Signals(), 1, "old-signal")
				c.Args[16] = "1"
			}},
			{"NonNumericDelay", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				c.Args[14] = "later"
			}},
			{"NonNumericLimit", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				c.Args[16] = "many"
			}},
			{"WrongArity", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				c.Keys = c.Keys[:14]
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := setupSusp(t)
				eid, sp, res := f.suspended()
				p := signalFor(eid, res.Waitpoint, "approve")
				p.Lane = "default"
				call := p.DeliverCall()
				tc.setup(f, eid, sp.WaitpointID, &call)
				_, err := f.fcall(call)
				suspWantCode(t, err, tc.code)
				if f.exists(model.KeysOn(eid.Partition()).Signal(p.SignalID)) {
					t.Error("signal recorded on error")
				}
			})
		}
	})

	t.Run("SignalLimitCountsLifetime", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.ResumeConditionJSON = signalCond("all", 1, "a", "b", "c")
		res := f.suspend(sp)
		for i, want := range []string{"no_op", "appended_to_waitpoint"} {
			p := signalFor(eid, res.Waitpoint, []string{"x", "a"}[i])
			p.MaxSignalsPerExecution = 2
			if out := f.deliver(p); out.Effect != want {
				t.Fatalf("signal %d: %+v", i, out)
			}
		}
		p := signalFor(eid, res.Waitpoint, "b")
		p.MaxSignalsPerExecution = 2
		_, err := f.c.DeliverSignal(f.ctx, p)
		suspWantCode(t, err, valkey.CodeSignalLimitExceeded)
	})
}

// compositeCond wraps a tree in the composite condition envelope.
func compositeCond(tree map[string]any) string {
	b, _ := json.Marshal(map[string]any{"v": 1, "composite": true, "tree": tree})
	return string(b)
}

func TestCompositeConditions(t *testing.T) {
	t.Parallel()

	t.Run("AllOf", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.ResumeConditionJSON = compositeCond(map[string]any{"kind": "AllOf", "path": "", "members": []any{
			map[string]any{"kind": "Single", "path": "members[0]", "waitpoint_key": sp.WaitpointKey,
				"matcher": map[string]any{"kind": "ByName", "name": "a"}},
			map[string]any{"kind": "Single", "path": "members[1]", "waitpoint_key": sp.WaitpointKey,
				"matcher": map[string]any{"kind": "ByName", "name": "b"}},
		}})
		res := f.suspend(sp)
		k, pk := model.KeysFor(eid), model.KeysOn(eid.Partition())
		suspWantFields(t, "condition", f.hgetall(pk.WaitpointCondition(sp.WaitpointID)), map[string]string{
			"condition_type": "composite", "composite": "1", "match_mode": "composite", "total_matchers": "0"})
		if mm := f.hgetall(k.SuspensionMemberMap()); len(mm) != 2 || mm["wp:"+sp.WaitpointKey+":members[1]"] != "members[1]" {
			t.Errorf("member map %v", mm)
		}
		sigA := signalFor(eid, res.Waitpoint, "a")
		steps := []struct {
			p    *valkey.SignalParams
			want string
		}{
			{sigA, "appended_to_waitpoint"},
			{signalFor(eid, res.Waitpoint, "a"), "appended_to_waitpoint_duplicate"},
			{signalFor(eid, res.Waitpoint, "c"), "signal_ignored_matcher_failed"},
		}
		for i, s := range steps {
			if out := f.deliver(s.p); out.Effect != s.want {
				t.Fatalf("step %d: %+v want %s", i, out, s.want)
			}
		}
		if m := f.smembers(k.SuspensionSatisfiedSet()); len(m) != 1 || m[0] != "leaf:members[0]" {
			t.Errorf("satisfied set %v", m)
		}
		suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(sp.WaitpointID)), map[string]string{
			"signal_count": "3", "matched_signal_count": "2"})
		sigB := signalFor(eid, res.Waitpoint, "b")
		if out := f.deliver(sigB); out.Effect != "resume_condition_satisfied" {
			t.Fatalf("closing signal: %+v", out)
		}
		susp := f.hgetall(k.SuspensionCurrent())
		var all []string
		_ = json.Unmarshal([]byte(susp["all_satisfier_signals"]), &all)
		sort.Strings(all)
		want := []string{sigA.SignalID, sigB.SignalID}
		sort.Strings(want)
		if susp["closer_signal_id"] != sigB.SignalID || !sameJSON(all, want) || susp["close_reason"] != "resumed" {
			t.Errorf("suspension %v", susp)
		}
		for _, key := range []string{k.SuspensionSatisfiedSet(), k.SuspensionSatisfiedSet() + ":signals", k.SuspensionMemberMap()} {
			if f.exists(key) {
				t.Errorf("%s not cleaned up", key)
			}
		}
		suspWantFields(t, "core", f.hgetall(k.Core()), map[string]string{"lifecycle_phase": "runnable"})
		suspWantFields(t, "condition", f.hgetall(pk.WaitpointCondition(sp.WaitpointID)), map[string]string{
			"closed": "1", "closed_reason": "satisfied"})
	})

	t.Run("CountDistinctSources", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.ResumeConditionJSON = compositeCond(map[string]any{"kind": "Count", "path": "", "n": 2,
			"count_kind": "DistinctSources", "matcher": nil, "waitpoints": []string{sp.WaitpointKey}})
		res := f.suspend(sp)
		if out := f.deliver(signalFor(eid, res.Waitpoint, "vote")); out.Effect != "appended_to_waitpoint" {
			t.Fatalf("%+v", out)
		}
		if out := f.deliver(signalFor(eid, res.Waitpoint, "vote")); out.Effect != "appended_to_waitpoint_duplicate" {
			t.Fatalf("same source: %+v", out)
		}
		other := signalFor(eid, res.Waitpoint, "vote")
		other.SourceIdentity = "src-2"
		if out := f.deliver(other); out.Effect != "resume_condition_satisfied" {
			t.Fatalf("second source: %+v", out)
		}
	})

	t.Run("AllOfNestedCountAndExtras", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.Extra = []valkey.WaitpointBinding{{WaitpointID: model.NewUUID().String(), WaitpointKey: "second"}}
		sp.ResumeConditionJSON = compositeCond(map[string]any{"kind": "AllOf", "path": "", "members": []any{
			map[string]any{"kind": "Single", "path": "members[0]", "waitpoint_key": sp.WaitpointKey, "matcher": nil},
			map[string]any{"kind": "Count", "path": "members[1]", "n": 2, "count_kind": "DistinctSignals",
				"matcher": map[string]any{"kind": "Wildcard"}, "waitpoints": []string{"second"}},
		}})
		res := f.suspend(sp)
		k, pk := model.KeysFor(eid), model.KeysOn(eid.Partition())
		if mm := f.hgetall(k.SuspensionMemberMap()); mm["wp:second:members[1]"] != "members[1]" || len(mm) != 2 {
			t.Errorf("member map %v", mm)
		}
		x := res.Extra[0]
		for i, want := range []string{"appended_to_waitpoint", "appended_to_waitpoint"} {
			if out := f.deliver(signalFor(eid, x, "n"+strconv.Itoa(i))); out.Effect != want {
				t.Fatalf("extra signal %d: %+v", i, out)
			}
		}
		if !f.sismember(k.SuspensionSatisfiedSet(), "node:members[1]") {
			t.Error("count node not lifted")
		}
		if out := f.deliver(signalFor(eid, res.Waitpoint, "any")); out.Effect != "resume_condition_satisfied" {
			t.Fatalf("primary: %+v", out)
		}
		// As FlowFabric's deliver_signal closes the other waitpoints: the
		// waitpoint resumed (and satisfied), its condition satisfied.
		extra := f.hgetall(pk.Waitpoint(x.WaitpointID))
		suspWantFields(t, "extra", extra, map[string]string{"state": "closed", "close_reason": "resumed"})
		if extra["satisfied_at"] == "" || extra["satisfied_at"] != extra["closed_at"] {
			t.Errorf("extra waitpoint satisfied_at %q, closed_at %q", extra["satisfied_at"], extra["closed_at"])
		}
		suspWantFields(t, "extra condition", f.hgetall(pk.WaitpointCondition(x.WaitpointID)),
			map[string]string{"closed": "1", "closed_reason": "satisfied"})
		if out, err := f.c.DeliverSignal(f.ctx, signalFor(eid, x, "late")); err == nil {
			t.Errorf("late signal on closed extra accepted: %+v", out)
		}
	})

	t.Run("NotInCondition", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		sp := f.suspendParams(eid, cl)
		sp.ResumeConditionJSON = compositeCond(map[string]any{"kind": "Single", "path": "",
			"waitpoint_key": "somewhere-else", "matcher": nil})
		res := f.suspend(sp)
		if out := f.deliver(signalFor(eid, res.Waitpoint, "a")); out.Effect != "signal_ignored_not_in_condition" {
			t.Fatalf("%+v", out)
		}
		suspWantFields(t, "waitpoint", f.hgetall(model.KeysOn(eid.Partition()).Waitpoint(sp.WaitpointID)), map[string]string{
			"signal_count": "1", "matched_signal_count": "0"})
	})
}

func TestBufferedSignals(t *testing.T) {
	t.Parallel()

	buffer := func(f *suspFix, eid model.ExecutionID, g *valkey.WaitpointGrant, name string) *valkey.SignalResult {
		f.t.Helper()
		res, err := f.c.BufferSignalForPendingWaitpoint(f.ctx, signalFor(eid, *g, name))
		if err != nil {
			f.t.Fatalf("buffer: %v", err)
		}
		return res
	}

	t.Run("AlreadySatisfiedKeepsLease", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		g := f.pending(eid, cl)
		out := buffer(f, eid, g, "approve")
		pk, k := model.KeysOn(eid.Partition()), model.KeysFor(eid)
		if out.Effect != "buffered_for_pending_waitpoint" {
			t.Fatalf("%+v", out)
		}
		suspWantFields(t, "signal", f.hgetall(pk.Signal(out.SignalID)), map[string]string{
			"observed_effect": "buffered_for_pending_waitpoint", "target_waitpoint_id": g.WaitpointID})
		// Delivering to a pending waitpoint is refused.
		_, err := f.c.DeliverSignal(f.ctx, signalFor(eid, *g, "approve"))
		suspWantCode(t, err, valkey.CodeWaitpointPendingUseBuffer)

		p := f.suspendParams(eid, cl)
		p.WaitpointID, p.WaitpointKey, p.UsePendingWaitpoint, p.IdempotencyKey = g.WaitpointID, "", true, "s1"
		res := f.suspend(p)
		if !res.AlreadySatisfied || res.Waitpoint != *g || res.SuspensionID != p.SuspensionID {
			t.Fatalf("%+v", res)
		}
		suspWantFields(t, "core", f.hgetall(k.Core()), map[string]string{"lifecycle_phase": "active",
			"ownership_state": "leased", "current_lease_id": cl.LeaseID})
		if !f.exists(k.LeaseCurrent()) || f.exists(k.SuspensionCurrent()) {
			t.Error("lease released or suspension written")
		}
		suspWantFields(t, "waitpoint", f.hgetall(pk.Waitpoint(g.WaitpointID)), map[string]string{
			"state": "closed", "close_reason": "resumed", "suspension_id": p.SuspensionID})
		suspWantFields(t, "condition", f.hgetall(pk.WaitpointCondition(g.WaitpointID)), map[string]string{
			"satisfied_count": "1", "matcher:0:satisfied": "1", "matcher:0:signal_id": out.SignalID})
		if o := f.hgetall(k.SuspendDedup("s1"))["outcome"]; o != "ALREADY_SATISFIED\t"+p.SuspensionID+"\t"+g.WaitpointID+"\tpending-key\t"+g.Token+"\t0" {
			t.Errorf("dedup outcome %q", o)
		}
		again, err := f.c.SuspendExecution(f.ctx, p)
		if err != nil || !again.AlreadySatisfied || again.Waitpoint != *g {
			t.Errorf("replay %+v %v", again, err)
		}
	})

	t.Run("PartialBufferedThenSuspended", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		g := f.pending(eid, cl)
		buffer(f, eid, g, "a")
		p := f.suspendParams(eid, cl)
		p.WaitpointID, p.WaitpointKey, p.UsePendingWaitpoint = g.WaitpointID, "", true
		p.ResumeConditionJSON = signalCond("all", 1, "a", "b")
		if res := f.suspend(p); res.AlreadySatisfied {
			t.Fatal("satisfied with one of two")
		}
		suspWantFields(t, "condition", f.hgetall(model.KeysOn(eid.Partition()).WaitpointCondition(g.WaitpointID)),
			map[string]string{"satisfied_count": "1", "matcher:0:satisfied": "1", "matcher:1:satisfied": "0"})
		if out := f.deliver(signalFor(eid, *g, "b")); out.Effect != "resume_condition_satisfied" {
			t.Fatalf("%+v", out)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			code  valkey.ErrorCode
			setup func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call)
		}{
			{"NotFound", valkey.CodeExecutionNotFound, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.del(model.KeysFor(eid).Core())
			}},
			{"WaitpointMissing", valkey.CodeWaitpointNotFound, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.del(model.KeysOn(eid.Partition()).Waitpoint(wp))
			}},
			{"BadToken", valkey.CodeInvalidToken, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				c.Args[17] = "k1:" + goToken("", testSecret, "x", "y", "z")[1:]
			}},
			{"Closed", valkey.CodeWaitpointClosed, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.hset(model.KeysOn(eid.Partition()).Waitpoint(wp), "state", "closed")
			}},
			{"Limit", valkey.CodeSignalLimitExceeded, func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				f.zadd(model.KeysFor(eid).Signals(), 1, "s")
				c.Args[16] = "1"
			}},
			{"EmptyNumericSlotsTakeDefaults", "", func(f *suspFix, eid model.ExecutionID, wp string, c *valkey.Call) {
				for i := 12; i <= 16; i++ {
					c.Args[i] = ""
				}
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := setupSusp(t)
				eid, cl := f.active()
				g := f.pending(eid, cl)
				p := signalFor(eid, *g, "approve")
				call := p.BufferCall()
				tc.setup(f, eid, g.WaitpointID, &call)
				rep, err := f.fcall(call)
				if tc.code == "" {
					if err != nil || rep.Field(1) != "buffered_for_pending_waitpoint" {
						t.Fatalf("%v %v", rep, err)
					}
					return
				}
				suspWantCode(t, err, tc.code)
				if f.exists(model.KeysOn(eid.Partition()).Signal(p.SignalID)) {
					t.Error("signal recorded on error")
				}
			})
		}
	})

	t.Run("Duplicate", func(t *testing.T) {
		t.Parallel()
		f := setupSusp(t)
		eid, cl := f.active()
		g := f.pending(eid, cl)
		p := signalFor(eid, *g, "a")
		p.IdempotencyKey = "k"
		first, err := f.c.BufferSignalForPendingWaitpoint(f.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		q := signalFor(eid, *g, "a")
		q.IdempotencyKey = "k"
		dup, err := f.c.BufferSignalForPendingWaitpoint(f.ctx, q)
		if err != nil || !dup.Duplicate || dup.SignalID != first.SignalID {
			t.Fatalf("%+v %v", dup, err)
		}
	})
}

func TestClaimResumedExecution(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		code  valkey.ErrorCode
		setup func(f *suspFix, eid model.ExecutionID, c *valkey.Call)
	}{
		{"NotFound", valkey.CodeExecutionNotFound, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
			f.del(model.KeysFor(eid).Core())
		}},
		{"NotRunnable", valkey.CodeExecutionNotLeaseable, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
			f.hset(model.KeysFor(eid).Core(), "lifecycle_phase", "active")
		}},
		{"NotResumed", valkey.CodeNotAResumedExecution, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
			f.hset(model.KeysFor(eid).Core(), "attempt_state", "pending_first_attempt")
		}},
		{"NoGrant", valkey.CodeInvalidClaimGrant, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
			f.del(model.KeysFor(eid).ClaimGrant())
		}},
		{"OtherWorker", valkey.CodeInvalidClaimGrant, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
			c.Args[1] = "w2"
		}},
		{"GrantExpired", valkey.CodeClaimGrantExpired, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
			f.hset(model.KeysFor(eid).ClaimGrant(), "grant_expires_at", "1")
		}},
		{"NonNumericTTL", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
			c.Args[6] = "long"
		}},
		{"NonNumericRemaining", valkey.CodeInvalidInput, func(f *suspFix, eid model.ExecutionID, c *valkey.Call) {
			c.Args[7] = "some"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setupSusp(t)
			eid, _, _ := f.suspended()
			if _, err := f.c.ResumeExecution(f.ctx, &valkey.ResumeParams{ExecutionID: eid}); err != nil {
				t.Fatal(err)
			}
			f.grant(eid)
			call := (&valkey.ClaimResumedParams{ExecutionID: eid, WorkerID: "w1", WorkerInstanceID: "wi1",
				Lane: "default", LeaseID: "L", LeaseTTLMs: 1000}).Call()
			tc.setup(f, eid, &call)
			_, err := f.fcall(call)
			suspWantCode(t, err, tc.code)
			if f.exists(model.KeysFor(eid).LeaseCurrent()) {
				t.Error("lease written on error")
			}
			if tc.code == valkey.CodeClaimGrantExpired && f.exists(model.KeysFor(eid).ClaimGrant()) {
				t.Error("expired grant kept")
			}
		})
	}
}
