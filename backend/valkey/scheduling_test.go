package valkey_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

func grantParams(eid model.ExecutionID, lane string) *valkey.IssueClaimGrantParams {
	return &valkey.IssueClaimGrantParams{
		ExecutionID: eid, WorkerID: "w1", WorkerInstanceID: "wi1", Lane: lane,
		CapabilityHash: "h", GrantTTLMs: 5000, RouteSnapshotJSON: `{"r":1}`, AdmissionSummary: "adm",
	}
}

func TestIssueClaimGrant(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		e.seedRunnable(eid, "default", map[string]string{"required_capabilities": "gpu,x86"})
		p := grantParams(eid, "default")
		p.WorkerCapabilities = []string{"x86", "gpu", "arm"}
		before := e.now()
		if err := e.c.IssueClaimGrant(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		k := model.KeysFor(eid)
		g := e.hgetall(k.ClaimGrant())
		schedWantFields(t, "grant", g, map[string]string{
			"worker_id": "w1", "worker_instance_id": "wi1", "lane_id": "default", "capability_hash": "h",
			"route_snapshot_json": `{"r":1}`, "admission_summary": "adm",
		})
		if len(g) != 8 {
			t.Errorf("grant has %d fields, want 8: %v", len(g), g)
		}
		created, _ := strconv.ParseInt(g["created_at"], 10, 64)
		exp, _ := strconv.ParseInt(g["grant_expires_at"], 10, 64)
		if created < before || exp != created+5000 {
			t.Errorf("created_at %d grant_expires_at %d (before %d)", created, exp, before)
		}
		if pt := e.pexpiretime(k.ClaimGrant()); pt != exp {
			t.Errorf("PEXPIRETIME = %d, want grant_expires_at %d", pt, exp)
		}
		// Still eligible: the claim removes it.
		if _, ok := e.zscore(model.KeysOn(eid.Partition()).LaneEligible("default"), string(eid)); !ok {
			t.Error("grant removed the execution from the eligible set")
		}
	})

	t.Run("RawReplyIsEid", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		e.seedRunnable(eid, "default", nil)
		k := model.KeysFor(eid)
		rep, err := e.fcall("ff_issue_claim_grant",
			[]string{k.Core(), k.ClaimGrant(), model.KeysOn(eid.Partition()).LaneEligible("default")},
			[]string{string(eid), "w", "wi", "default", "", "1000", "", "", ""})
		if err != nil || rep.Status != "OK" || rep.Field(0) != string(eid) || len(rep.Fields) != 1 {
			t.Fatalf("reply %+v %v", rep, err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			setup func(e *schedEnv, eid model.ExecutionID, p *valkey.IssueClaimGrantParams)
			code  valkey.ErrorCode
		}{
			{"NotFound", func(e *schedEnv, eid model.ExecutionID, p *valkey.IssueClaimGrantParams) {}, valkey.CodeExecutionNotFound},
			{"NotRunnable", func(e *schedEnv, eid model.ExecutionID, p *valkey.IssueClaimGrantParams) {
				e.seedRunnable(eid, "default", map[string]string{"lifecycle_phase": "active"})
			}, valkey.CodeExecutionNotEligible},
			{"NotEligibleNow", func(e *schedEnv, eid model.ExecutionID, p *valkey.IssueClaimGrantParams) {
				e.seedDelayed(eid, "default", e.now()+60000, nil)
			}, valkey.CodeExecutionNotEligible},
			{"GrantExists", func(e *schedEnv, eid model.ExecutionID, p *valkey.IssueClaimGrantParams) {
				e.seedRunnable(eid, "default", nil)
				e.hset(model.KeysFor(eid).ClaimGrant(), map[string]string{"worker_id": "other"})
			}, valkey.CodeGrantAlreadyExists},
			{"NotInEligibleSet", func(e *schedEnv, eid model.ExecutionID, p *valkey.IssueClaimGrantParams) {
				e.seedRunnable(eid, "default", nil)
				p.Lane = "otherlane"
			}, valkey.CodeExecutionNotInEligibleSet},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				eid := e.newEID()
				p := grantParams(eid, "default")
				tc.setup(e, eid, p)
				schedWantCode(t, e.c.IssueClaimGrant(e.ctx, p), tc.code)
				if tc.code != valkey.CodeGrantAlreadyExists && e.exists(model.KeysFor(eid).ClaimGrant()) {
					t.Error("grant written on error")
				}
			})
		}
	})

	t.Run("CapabilityMismatch", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		e.seedRunnable(eid, "default", map[string]string{"required_capabilities": "zeta,alpha,gpu,x86"})
		p := grantParams(eid, "default")
		p.WorkerCapabilities = []string{"x86"}
		before := e.now()
		le := schedWantCode(t, e.c.IssueClaimGrant(e.ctx, p), valkey.CodeCapabilityMismatch)
		if le.Detail(0) != "alpha,gpu,zeta" {
			t.Errorf("missing = %q, want sorted alpha,gpu,zeta", le.Detail(0))
		}
		k := model.KeysFor(eid)
		stamp, _ := strconv.ParseInt(e.hgetall(k.Core())["last_capability_mismatch_at"], 10, 64)
		if stamp < before {
			t.Errorf("last_capability_mismatch_at = %d, want >= %d", stamp, before)
		}
		if e.exists(k.ClaimGrant()) {
			t.Error("grant written on mismatch")
		}
	})

	t.Run("EmptyRequiredMatchesAnyWorker", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		e.seedRunnable(eid, "default", nil)
		if err := e.c.IssueClaimGrant(e.ctx, grantParams(eid, "default")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("InvalidCapabilities", func(t *testing.T) {
		t.Parallel()
		tooManyTokens := make([]string, 257)
		for i := range tooManyTokens {
			tooManyTokens[i] = "c" + strconv.Itoa(i)
		}
		cases := []struct{ name, required, worker, detail string }{
			{"RequiredBytes", strings.Repeat("a", 4097), "", "required:too_many_bytes"},
			{"RequiredTokens", strings.Join(tooManyTokens, ","), "", "required:too_many_tokens"},
			{"WorkerBytes", "a", strings.Repeat("b", 4097), "worker:too_many_bytes"},
			{"WorkerTokens", "a", strings.Join(tooManyTokens, ","), "worker:too_many_tokens"},
			// Duplicates count toward the cap.
			{"WorkerDuplicateTokens", "a", strings.Repeat("a,", 257), "worker:too_many_tokens"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				eid := e.newEID()
				e.seedRunnable(eid, "default", map[string]string{"required_capabilities": tc.required})
				k := model.KeysFor(eid)
				_, err := e.fcall("ff_issue_claim_grant",
					[]string{k.Core(), k.ClaimGrant(), model.KeysOn(eid.Partition()).LaneEligible("default")},
					[]string{string(eid), "w", "wi", "default", "", "1000", "", "", tc.worker})
				le := schedWantCode(t, err, valkey.CodeInvalidCapabilities)
				if le.Detail(0) != tc.detail {
					t.Errorf("detail = %q, want %q", le.Detail(0), tc.detail)
				}
			})
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		e.seedRunnable(eid, "default", nil)
		k := model.KeysFor(eid)
		keys := []string{k.Core(), k.ClaimGrant(), model.KeysOn(eid.Partition()).LaneEligible("default")}
		_, err := e.fcall("ff_issue_claim_grant", keys,
			[]string{string(eid), "w", "wi", "default", "", "soon", "", "", ""})
		le := schedWantCode(t, err, valkey.CodeInvalidInput)
		if le.Detail(0) != "grant_ttl_ms must be a number, got: soon" {
			t.Errorf("detail = %q", le.Detail(0))
		}
		// Short ARGV: the TTL slot is missing.
		_, err = e.fcall("ff_issue_claim_grant", keys, []string{string(eid)})
		schedWantCode(t, err, valkey.CodeInvalidInput)
		// Only the numeric slots are required; missing trailing strings are "".
		rep, err := e.fcall("ff_issue_claim_grant", keys, []string{string(eid), "w", "wi", "default", "", "1000"})
		if err != nil || rep.Field(0) != string(eid) {
			t.Fatalf("short optional ARGV: %+v %v", rep, err)
		}
	})
}

func TestPromoteDelayed(t *testing.T) {
	t.Parallel()

	t.Run("PromotedPreservesAttemptState", func(t *testing.T) {
		t.Parallel()
		for _, as := range []string{"pending_first_attempt", "pending_retry_attempt", "pending_replay_attempt", "attempt_interrupted"} {
			t.Run(as, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				eid := e.newEID()
				now := e.now()
				f := e.seedDelayed(eid, "default", now-10, map[string]string{"attempt_state": as, "priority": "7"})
				st, err := e.c.PromoteDelayed(e.ctx, &valkey.PromoteDelayedParams{ExecutionID: eid, Lane: "default", NowMs: now})
				if err != nil || st != valkey.PromotePromoted {
					t.Fatalf("promote = %s, %v", st, err)
				}
				core := e.hgetall(model.KeysFor(eid).Core())
				ns := strconv.FormatInt(now, 10)
				schedWantFields(t, "core", core, map[string]string{
					"lifecycle_phase": "runnable", "ownership_state": "unowned", "eligibility_state": "eligible_now",
					"blocking_reason": "waiting_for_worker", "blocking_detail": "", "terminal_outcome": "none",
					"attempt_state": as, "public_state": "waiting", "delay_until": "",
					"last_transition_at": ns, "last_mutation_at": ns,
				})
				idx := model.KeysOn(eid.Partition())
				if _, ok := e.zscore(idx.LaneDelayed("default"), string(eid)); ok {
					t.Error("still in delayed")
				}
				ca, _ := strconv.ParseFloat(f["created_at"], 64)
				if sc, ok := e.zscore(idx.LaneEligible("default"), string(eid)); !ok || sc != -7e12+ca {
					t.Errorf("eligible score = %v (%v), want %v", sc, ok, -7e12+ca)
				}
			})
		}
	})

	t.Run("NotYetDue", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		now := e.now()
		e.seedDelayed(eid, "default", now+60000, nil)
		st, err := e.c.PromoteDelayed(e.ctx, &valkey.PromoteDelayedParams{ExecutionID: eid, Lane: "default", NowMs: now})
		if err != nil || st != valkey.PromoteNotYetDue {
			t.Fatalf("promote = %s, %v", st, err)
		}
		if _, ok := e.zscore(model.KeysOn(eid.Partition()).LaneDelayed("default"), string(eid)); !ok {
			t.Error("not-yet-due removed from delayed")
		}
		if e.hgetall(model.KeysFor(eid).Core())["eligibility_state"] != "not_eligible_until_time" {
			t.Error("core changed")
		}
	})

	t.Run("Cleanup", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name string
			over map[string]string
			seed bool
			want valkey.PromoteStatus
		}{
			{"NotFound", nil, false, valkey.PromoteNotFoundCleaned},
			{"NotRunnable", map[string]string{"lifecycle_phase": "terminal"}, true, valkey.PromoteNotRunnableCleaned},
			{"NotDelayed", map[string]string{"eligibility_state": "blocked_by_dependencies"}, true, valkey.PromoteNotDelayedCleaned},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				eid := e.newEID()
				now := e.now()
				delayed := model.KeysOn(eid.Partition()).LaneDelayed("default")
				if tc.seed {
					e.seedDelayed(eid, "default", now-1, tc.over)
				} else {
					e.zadd(delayed, float64(now-1), string(eid))
				}
				before := e.hgetall(model.KeysFor(eid).Core())
				st, err := e.c.PromoteDelayed(e.ctx, &valkey.PromoteDelayedParams{ExecutionID: eid, Lane: "default", NowMs: now})
				if err != nil || st != tc.want {
					t.Fatalf("promote = %s, %v; want %s", st, err, tc.want)
				}
				if _, ok := e.zscore(delayed, string(eid)); ok {
					t.Error("stale member left in delayed")
				}
				if after := e.hgetall(model.KeysFor(eid).Core()); len(after) != len(before) || after["last_mutation_at"] != before["last_mutation_at"] {
					t.Error("core touched by cleanup")
				}
			})
		}
	})

	t.Run("GarbageMember", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		p := model.Partition{Family: model.FamilyFlow, Index: 3}
		delayed := model.KeysOn(p).LaneDelayed("default")
		e.zadd(delayed, 1, "not-an-eid")
		st, err := e.c.PromoteDelayed(e.ctx, &valkey.PromoteDelayedParams{
			ExecutionID: "not-an-eid", Partition: &p, Lane: "default", NowMs: e.now()})
		if err != nil || st != valkey.PromoteNotFoundCleaned {
			t.Fatalf("promote garbage = %s, %v", st, err)
		}
		if _, ok := e.zscore(delayed, "not-an-eid"); ok {
			t.Error("garbage left in delayed")
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		idx := model.KeysOn(eid.Partition())
		keys := []string{model.KeysFor(eid).Core(), idx.LaneDelayed("default"), idx.LaneEligible("default")}
		_, err := e.fcall("ff_promote_delayed", keys, []string{string(eid), "now"})
		schedWantCode(t, err, valkey.CodeInvalidInput)
		_, err = e.fcall("ff_promote_delayed", keys, []string{string(eid)})
		schedWantCode(t, err, valkey.CodeInvalidInput)
		_, err = e.fcall("ff_promote_delayed", keys, nil)
		schedWantCode(t, err, valkey.CodeInvalidInput)
	})
}

func TestChangePriority(t *testing.T) {
	t.Parallel()

	t.Run("ClampsAndRescores", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ in, want int }{{42, 42}, {-5, 0}, {12000, 9000}} {
			t.Run(strconv.Itoa(tc.in), func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				eid := e.newEID()
				f := e.seedRunnable(eid, "default", map[string]string{"priority": "3"})
				res, err := e.c.ChangePriority(e.ctx, eid, tc.in)
				if err != nil || res.Old != 3 || res.New != int64(tc.want) {
					t.Fatalf("change = %+v, %v", res, err)
				}
				core := e.hgetall(model.KeysFor(eid).Core())
				if core["priority"] != strconv.Itoa(tc.want) || core["last_mutation_at"] < f["last_mutation_at"] {
					t.Errorf("priority = %q, last_mutation_at %q", core["priority"], core["last_mutation_at"])
				}
				ca, _ := strconv.ParseFloat(f["created_at"], 64)
				if sc, _ := e.zscore(model.KeysOn(eid.Partition()).LaneEligible("default"), string(eid)); sc != -float64(tc.want)*1e12+ca {
					t.Errorf("score = %v, want %v", sc, -float64(tc.want)*1e12+ca)
				}
			})
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		_, err := e.c.ChangePriority(e.ctx, e.newEID(), 1)
		schedWantCode(t, err, valkey.CodeExecutionNotFound)
		eid := e.newEID()
		e.seedDelayed(eid, "default", e.now()+60000, nil)
		_, err = e.c.ChangePriority(e.ctx, eid, 1)
		schedWantCode(t, err, valkey.CodeExecutionNotEligible)
		x := e.claimed(nil)
		_, err = e.c.ChangePriority(e.ctx, x.eid, 1)
		schedWantCode(t, err, valkey.CodeExecutionNotEligible)
		_, err = e.fcall("ff_change_priority",
			[]string{model.KeysFor(eid).Core(), model.KeysOn(eid.Partition()).LaneEligible("default")},
			[]string{string(eid), "high"})
		le := schedWantCode(t, err, valkey.CodeInvalidInput)
		if le.Detail(0) != "new_priority must be a number, got: high" {
			t.Errorf("detail = %q", le.Detail(0))
		}
	})
}

func TestWorkerRegistry(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	now := e.now()
	p := &valkey.RegisterWorkerParams{
		Namespace: "tenant-a", InstanceID: "wi-1", WorkerID: "w-1", Lanes: []string{"b", "a"},
		Capabilities: []string{"x86", "gpu"}, TTLMs: 30000, NowMs: now,
	}
	alive, caps, index := model.WorkerAliveKey("tenant-a", "wi-1"), model.WorkerCapsKey("tenant-a", "wi-1"), model.WorkersIndexKey("tenant-a")

	// Heartbeat before registration.
	hb, err := e.c.HeartbeatWorker(e.ctx, "tenant-a", "wi-1", now)
	if err != nil || hb.Registered {
		t.Fatalf("heartbeat unregistered = %+v, %v", hb, err)
	}

	st, err := e.c.RegisterWorker(e.ctx, p)
	if err != nil || st != valkey.WorkerRegistered {
		t.Fatalf("register = %q, %v", st, err)
	}
	if e.get(alive) != "1" {
		t.Error("alive key not 1")
	}
	for _, k := range []string{alive, caps} {
		if pt := e.pttl(k); pt <= 0 || pt > 30000 {
			t.Errorf("PTTL %s = %d", k, pt)
		}
	}
	ns := strconv.FormatInt(now, 10)
	c := e.hgetall(caps)
	schedWantFields(t, "caps", c, map[string]string{
		"worker_id": "w-1", "lanes_csv": "a,b", "caps_csv": "gpu,x86", "ttl_ms": "30000",
		"registered_at_ms": ns, "last_heartbeat_ms": ns,
	})
	if len(c) != 6 {
		t.Errorf("caps has %d fields", len(c))
	}
	if !e.sismember(index, "wi-1") || e.pttl(index) != -1 {
		t.Error("index membership / TTL wrong")
	}

	p.NowMs, p.TTLMs = now+10, 20000
	if st, err := e.c.RegisterWorker(e.ctx, p); err != nil || st != valkey.WorkerRefreshed {
		t.Fatalf("re-register = %q, %v", st, err)
	}
	if pt := e.pttl(alive); pt > 20000 {
		t.Errorf("alive PTTL after refresh = %d", pt)
	}

	hb, err = e.c.HeartbeatWorker(e.ctx, "tenant-a", "wi-1", now+99)
	if err != nil || !hb.Registered || hb.TTLMs != 20000 || hb.NextExpiryMs != now+99+20000 {
		t.Fatalf("heartbeat = %+v, %v", hb, err)
	}
	if e.hgetall(caps)["last_heartbeat_ms"] != strconv.FormatInt(now+99, 10) {
		t.Error("last_heartbeat_ms not stamped")
	}

	// Alive key gone (TTL elapsed / marked dead): not_registered.
	e.c.Raw().Do(e.ctx, e.c.Raw().B().Del().Key(alive).Build())
	if hb, err := e.c.HeartbeatWorker(e.ctx, "tenant-a", "wi-1", now); err != nil || hb.Registered {
		t.Fatalf("heartbeat without alive = %+v, %v", hb, err)
	}
	// Non-numeric stored ttl: not_registered.
	e.hset(caps, map[string]string{"ttl_ms": "abc"})
	if hb, err := e.c.HeartbeatWorker(e.ctx, "tenant-a", "wi-1", now); err != nil || hb.Registered {
		t.Fatalf("heartbeat bad ttl = %+v, %v", hb, err)
	}

	// Bad input.
	_, err = e.fcall("ff_register_worker", []string{alive, caps, index}, []string{"wi-1", "w-1", "", "", "x", "1"})
	schedWantCode(t, err, valkey.CodeInvalidInput)
	_, err = e.fcall("ff_register_worker", []string{alive, caps, index}, []string{"wi-1", "w-1", "", "", "1000", "later"})
	schedWantCode(t, err, valkey.CodeInvalidInput)
	_, err = e.fcall("ff_heartbeat_worker", []string{alive, caps}, []string{"now"})
	schedWantCode(t, err, valkey.CodeInvalidInput)
	_, err = e.fcall("ff_heartbeat_worker", []string{alive, caps}, nil)
	schedWantCode(t, err, valkey.CodeInvalidInput)
}

func TestUpdateProgress(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		x := e.claimed(nil)
		k := model.KeysFor(x.eid)
		if err := e.c.UpdateProgress(e.ctx, &valkey.UpdateProgressParams{
			ExecutionID: x.eid, LeaseID: "lease-1", LeaseEpoch: 1, Pct: "40", Message: "halfway-ish"}); err != nil {
			t.Fatal(err)
		}
		core := e.hgetall(k.Core())
		schedWantFields(t, "core", core, map[string]string{"progress_pct": "40", "progress_message": "halfway-ish"})
		if core["progress_updated_at"] == "" || core["progress_updated_at"] != core["last_mutation_at"] {
			t.Errorf("timestamps %q %q", core["progress_updated_at"], core["last_mutation_at"])
		}
		// Empty values leave the previous ones.
		if err := e.c.UpdateProgress(e.ctx, &valkey.UpdateProgressParams{ExecutionID: x.eid, LeaseID: "lease-1", LeaseEpoch: 1}); err != nil {
			t.Fatal(err)
		}
		schedWantFields(t, "core", e.hgetall(k.Core()), map[string]string{"progress_pct": "40", "progress_message": "halfway-ish"})
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			over  map[string]string
			lease string
			epoch uint64
			code  valkey.ErrorCode
		}{
			{"NotActive", map[string]string{"lifecycle_phase": "runnable"}, "lease-1", 1, valkey.CodeExecutionNotActive},
			{"Revoked", map[string]string{"ownership_state": "lease_revoked"}, "lease-1", 1, valkey.CodeLeaseRevoked},
			{"Expired", map[string]string{"lease_expires_at": "1"}, "lease-1", 1, valkey.CodeLeaseExpired},
			{"StaleLeaseID", nil, "lease-2", 1, valkey.CodeStaleLease},
			{"StaleEpoch", nil, "lease-1", 2, valkey.CodeStaleLease},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				x := e.claimed(nil)
				k := model.KeysFor(x.eid)
				if tc.over != nil {
					e.hset(k.Core(), tc.over)
				}
				err := e.c.UpdateProgress(e.ctx, &valkey.UpdateProgressParams{ExecutionID: x.eid, LeaseID: tc.lease, LeaseEpoch: tc.epoch, Pct: "1"})
				le := schedWantCode(t, err, tc.code)
				if tc.code == valkey.CodeExecutionNotActive && len(le.Details) != 4 {
					t.Errorf("details = %v", le.Details)
				}
				core := e.hgetall(k.Core())
				if core["progress_pct"] != "" {
					t.Error("progress written on error")
				}
				if tc.name == "Expired" && core["ownership_state"] != "leased" {
					t.Error("update_progress must not mark the lease expired")
				}
			})
		}
		e := newSchedEnv(t)
		err := e.c.UpdateProgress(e.ctx, &valkey.UpdateProgressParams{ExecutionID: e.newEID(), LeaseID: "l", LeaseEpoch: 1})
		schedWantCode(t, err, valkey.CodeExecutionNotFound)
	})
}

func TestIssueReclaimGrant(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		for _, own := range []string{"lease_expired_reclaimable", "lease_revoked"} {
			t.Run(own, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				x := e.claimed(nil)
				k := model.KeysFor(x.eid)
				e.hset(k.Core(), map[string]string{"ownership_state": own})
				p := grantParams(x.eid, "default")
				p.WorkerID = "w2"
				exp, err := e.c.IssueReclaimGrant(e.ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				g := e.hgetall(k.ClaimGrant())
				schedWantFields(t, "grant", g, map[string]string{
					"worker_id": "w2", "worker_instance_id": "wi1", "lane_id": "default",
					"grant_expires_at": strconv.FormatInt(exp, 10), "route_snapshot_json": `{"r":1}`,
				})
				created, _ := strconv.ParseInt(g["created_at"], 10, 64)
				if exp != created+5000 || e.pexpiretime(k.ClaimGrant()) != exp {
					t.Errorf("expires %d created %d pexpiretime %d", exp, created, e.pexpiretime(k.ClaimGrant()))
				}
				if _, ok := e.zscore(model.KeysOn(x.eid.Partition()).LeaseExpiry(), string(x.eid)); !ok {
					t.Error("reclaim grant touched lease_expiry")
				}
				_, err = e.c.IssueReclaimGrant(e.ctx, p)
				schedWantCode(t, err, valkey.CodeGrantAlreadyExists)
			})
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		_, err := e.c.IssueReclaimGrant(e.ctx, grantParams(e.newEID(), "default"))
		schedWantCode(t, err, valkey.CodeExecutionNotFound)
		x := e.claimed(nil) // leased
		_, err = e.c.IssueReclaimGrant(e.ctx, grantParams(x.eid, "default"))
		schedWantCode(t, err, valkey.CodeExecutionNotReclaimable)
		eid := e.newEID()
		e.seedRunnable(eid, "default", map[string]string{"ownership_state": "lease_revoked"})
		_, err = e.c.IssueReclaimGrant(e.ctx, grantParams(eid, "default"))
		schedWantCode(t, err, valkey.CodeExecutionNotReclaimable)

		y := e.claimed(map[string]string{"required_capabilities": "gpu,tpu"})
		k := model.KeysFor(y.eid)
		e.hset(k.Core(), map[string]string{"ownership_state": "lease_expired_reclaimable"})
		p := grantParams(y.eid, "default")
		p.WorkerCapabilities = []string{"gpu"}
		_, err = e.c.IssueReclaimGrant(e.ctx, p)
		le := schedWantCode(t, err, valkey.CodeCapabilityMismatch)
		if le.Detail(0) != "tpu" || e.hgetall(k.Core())["last_capability_mismatch_at"] == "" || e.exists(k.ClaimGrant()) {
			t.Errorf("mismatch detail %q / stamp / grant", le.Detail(0))
		}
		_, err = e.fcall("ff_issue_reclaim_grant",
			[]string{k.Core(), k.ClaimGrant(), model.KeysOn(y.eid.Partition()).LeaseExpiry()},
			[]string{string(y.eid), "w", "wi", "default", "", "", "", "", strings.Repeat("z", 4097)})
		schedWantCode(t, err, valkey.CodeInvalidInput)
		_, err = e.fcall("ff_issue_reclaim_grant",
			[]string{k.Core(), k.ClaimGrant(), model.KeysOn(y.eid.Partition()).LeaseExpiry()},
			[]string{string(y.eid), "w", "wi", "default", "", "100", "", "", strings.Repeat("z", 4097)})
		le = schedWantCode(t, err, valkey.CodeInvalidCapabilities)
		if le.Detail(0) != "worker:too_many_bytes" {
			t.Errorf("detail = %q", le.Detail(0))
		}
	})
}

func TestIssueGrantAndClaim(t *testing.T) {
	t.Parallel()

	t.Run("Fresh", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		e.seedRunnable(eid, "default", map[string]string{
			"attempt_state": "pending_retry_attempt", "total_attempt_count": "2", "current_lease_epoch": "4",
			"pending_retry_reason": "boom", "pending_previous_attempt_index": "1", "started_at": "777",
		})
		deadline := e.now() + 3600000
		res, err := e.c.IssueGrantAndClaim(e.ctx, &valkey.IssueGrantAndClaimParams{
			ExecutionID: eid, WorkerID: "w1", WorkerInstanceID: "wi1", CapabilityHash: "h",
			LeaseID: "L", LeaseTTLMs: 30000, AttemptID: "A",
			AttemptPolicyJSON: `{"max":3,"nested":{"a":1},"name":"x"}`, AttemptTimeoutMs: 60000, ExecutionDeadlineAt: deadline,
		})
		if err != nil || res.LeaseID != "L" || res.LeaseEpoch != 5 || res.AttemptIndex != 2 {
			t.Fatalf("claim = %+v, %v", res, err)
		}
		k := model.KeysFor(eid)
		idx := model.KeysOn(eid.Partition())
		core := e.hgetall(k.Core())
		now, _ := strconv.ParseInt(core["lease_acquired_at"], 10, 64)
		ns, es, rs := strconv.FormatInt(now, 10), strconv.FormatInt(now+30000, 10), strconv.FormatInt(now+20000, 10)
		schedWantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "active", "ownership_state": "leased", "eligibility_state": "not_applicable",
			"blocking_reason": "none", "blocking_detail": "", "terminal_outcome": "none",
			"attempt_state": "running_attempt", "public_state": "active", "current_attempt_index": "2",
			"total_attempt_count": "3", "current_attempt_id": "A", "current_lease_id": "L", "current_lease_epoch": "5",
			"current_worker_id": "w1", "current_worker_instance_id": "wi1", "current_lane": "default",
			"lease_expires_at": es, "lease_last_renewed_at": ns, "lease_renewal_deadline": rs, "started_at": "777",
			"pending_retry_reason": "", "pending_previous_attempt_index": "", "last_transition_at": ns,
		})
		att := e.hgetall(k.Attempt(2))
		schedWantFields(t, "attempt", att, map[string]string{
			"attempt_id": "A", "execution_id": string(eid), "attempt_index": "2", "attempt_type": "retry",
			"attempt_state": "started", "created_at": ns, "started_at": ns, "lease_id": "L", "lease_epoch": "5",
			"worker_id": "w1", "worker_instance_id": "wi1", "retry_reason": "boom", "previous_attempt_index": "1",
		})
		schedWantFields(t, "usage", e.hgetall(k.AttemptUsage(2)), map[string]string{"last_usage_report_seq": "0"})
		schedWantFields(t, "policy", e.hgetall(k.AttemptPolicy(2)), map[string]string{"max": "3", "nested": `{"a":1}`, "name": "x"})
		if sc, ok := e.zscore(k.Attempts(), "2"); !ok || int64(sc) != now {
			t.Errorf("attempts score %v %v", sc, ok)
		}
		lc := e.hgetall(k.LeaseCurrent())
		schedWantFields(t, "lease_current", lc, map[string]string{
			"lease_id": "L", "lease_epoch": "5", "execution_id": string(eid), "attempt_id": "A", "worker_id": "w1",
			"worker_instance_id": "wi1", "acquired_at": ns, "expires_at": es, "last_renewed_at": ns, "renewal_deadline": rs,
		})
		if len(lc) != 10 || e.pexpiretime(k.LeaseCurrent()) != -1 {
			t.Errorf("lease_current %d fields, pexpiretime %d", len(lc), e.pexpiretime(k.LeaseCurrent()))
		}
		if e.exists(k.ClaimGrant()) {
			t.Error("grant not consumed")
		}
		if _, ok := e.zscore(idx.LaneEligible("default"), string(eid)); ok {
			t.Error("still eligible")
		}
		for key, want := range map[string]int64{idx.LeaseExpiry(): now + 30000, idx.LaneActive("default"): now + 30000,
			idx.AttemptTimeout(): now + 60000, idx.ExecutionDeadline(): deadline} {
			if sc, ok := e.zscore(key, string(eid)); !ok || int64(sc) != want {
				t.Errorf("%s score %v (%v), want %d", key, sc, ok, want)
			}
		}
		if !e.sismember(idx.WorkerLeases("wi1"), string(eid)) {
			t.Error("not in worker leases")
		}
		h := e.xrange(k.LeaseHistory())
		if len(h) != 1 {
			t.Fatalf("history %v", h)
		}
		schedWantFields(t, "acquired", h[0], map[string]string{
			"event": "acquired", "lease_id": "L", "lease_epoch": "5", "attempt_id": "A", "attempt_index": "2",
			"worker_id": "w1", "reason": "issue_grant_and_claim", "ts": ns,
		})
	})

	t.Run("Resumed", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		e.seedRunnable(eid, "default", map[string]string{
			"attempt_state": "attempt_interrupted", "total_attempt_count": "1", "current_attempt_index": "0",
			"current_attempt_id": "A0", "current_lease_epoch": "1", "lease_revoked_at": "5", "lease_expired_at": "6",
		})
		k := model.KeysFor(eid)
		e.hset(k.Attempt(0), map[string]string{"attempt_id": "A0", "attempt_state": "suspended", "suspended_at": "9", "suspension_id": "worker_delay"})
		res, err := e.c.IssueGrantAndClaim(e.ctx, &valkey.IssueGrantAndClaimParams{
			ExecutionID: eid, WorkerID: "w2", WorkerInstanceID: "wi2", LeaseID: "L2", LeaseTTLMs: 9000, AttemptID: "ignored",
			AttemptTimeoutMs: 5000,
		})
		if err != nil || res.LeaseID != "L2" || res.LeaseEpoch != 2 || res.AttemptIndex != 0 {
			t.Fatalf("resume = %+v, %v", res, err)
		}
		core := e.hgetall(k.Core())
		now, _ := strconv.ParseInt(core["lease_acquired_at"], 10, 64)
		ns := strconv.FormatInt(now, 10)
		schedWantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "active", "ownership_state": "leased", "attempt_state": "running_attempt",
			"current_attempt_index": "0", "current_attempt_id": "A0", "total_attempt_count": "1",
			"current_lease_id": "L2", "current_lease_epoch": "2", "current_worker_instance_id": "wi2",
			"lease_revoked_at": "", "lease_expired_at": "", "lease_renewal_deadline": strconv.FormatInt(now+6000, 10),
		})
		schedWantFields(t, "attempt", e.hgetall(k.Attempt(0)), map[string]string{
			"attempt_state": "started", "resumed_at": ns, "lease_id": "L2", "lease_epoch": "2",
			"worker_id": "w2", "worker_instance_id": "wi2", "suspended_at": "", "suspension_id": "",
		})
		if e.exists(k.Attempt(1)) || e.exists(k.Attempts()) {
			t.Error("resume created a new attempt")
		}
		schedWantFields(t, "lease_current", e.hgetall(k.LeaseCurrent()), map[string]string{"attempt_id": "A0", "lease_epoch": "2"})
		idx := model.KeysOn(eid.Partition())
		if _, ok := e.zscore(idx.AttemptTimeout(), string(eid)); ok {
			t.Error("resume path must not add attempt_timeout")
		}
		if _, ok := e.zscore(idx.LaneEligible("default"), string(eid)); ok {
			t.Error("still eligible")
		}
		h := e.xrange(k.LeaseHistory())
		if len(h) != 1 || h[0]["reason"] != "issue_grant_and_claim_resumed" || h[0]["attempt_index"] != "0" || h[0]["attempt_id"] != "A0" {
			t.Errorf("history %v", h)
		}
		if e.exists(k.ClaimGrant()) {
			t.Error("grant not consumed")
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name       string
			over       map[string]string
			noEligible bool
			grant      bool
			code       valkey.ErrorCode
		}{
			{"NotRunnable", map[string]string{"lifecycle_phase": "suspended"}, false, false, valkey.CodeExecutionNotEligible},
			{"Owned", map[string]string{"ownership_state": "leased"}, false, false, valkey.CodeLeaseConflict},
			{"TerminalOutcome", map[string]string{"terminal_outcome": "failed"}, false, false, valkey.CodeExecutionNotEligible},
			{"RunningAttempt", map[string]string{"attempt_state": "running_attempt"}, false, false, valkey.CodeActiveAttemptExists},
			{"GrantExists", nil, false, true, valkey.CodeGrantAlreadyExists},
			{"NotInEligibleSet", nil, true, false, valkey.CodeExecutionNotInEligibleSet},
			{"NotEligibleNow", map[string]string{"eligibility_state": "blocked_by_budget"}, false, false, valkey.CodeExecutionNotEligible},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				eid := e.newEID()
				e.seedRunnable(eid, "default", tc.over)
				k := model.KeysFor(eid)
				idx := model.KeysOn(eid.Partition())
				if tc.name == "NotEligibleNow" {
					e.zadd(idx.LaneEligible("default"), 1, string(eid))
				}
				if tc.noEligible {
					e.c.Raw().Do(e.ctx, e.c.Raw().B().Zrem().Key(idx.LaneEligible("default")).Member(string(eid)).Build())
				}
				if tc.grant {
					e.hset(k.ClaimGrant(), map[string]string{"worker_id": "x"})
				}
				_, err := e.c.IssueGrantAndClaim(e.ctx, &valkey.IssueGrantAndClaimParams{
					ExecutionID: eid, WorkerID: "w1", WorkerInstanceID: "wi1", Lane: "default", LeaseID: "L", LeaseTTLMs: 1000, AttemptID: "A"})
				schedWantCode(t, err, tc.code)
				if !tc.grant && e.exists(k.ClaimGrant()) {
					t.Error("grant left behind")
				}
				if e.exists(k.LeaseCurrent()) || e.exists(k.Attempt(0)) {
					t.Error("claim writes on error")
				}
			})
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		e.seedRunnable(eid, "default", nil)
		k := model.KeysFor(eid)
		idx := model.KeysOn(eid.Partition())
		keys := []string{k.Core(), k.ClaimGrant(), idx.LaneEligible("default"), idx.LeaseExpiry(), idx.WorkerLeases("wi"),
			k.Attempts(), k.LeaseCurrent(), k.LeaseHistory(), idx.LaneActive("default"), idx.AttemptTimeout(), idx.ExecutionDeadline()}
		for _, args := range [][]string{
			{string(eid), "w", "wi", "default", "", "L", "ttl", "A", "", "", ""},
			{string(eid), "w", "wi", "default", "", "L", "1000", "A", "", "soon", ""},
			{string(eid), "w", "wi", "default", "", "L", "1000", "A", "", "", "never"},
			{string(eid)},
		} {
			_, err := e.fcall("ff_issue_grant_and_claim", keys, args)
			schedWantCode(t, err, valkey.CodeInvalidInput)
		}
		_, err := e.fcall("ff_issue_grant_and_claim", keys,
			[]string{string(eid), "w", "wi", "default", "", "L", "1000", "A", "{not json", "", ""})
		schedWantCode(t, err, valkey.CodeInvalidPolicyJSON)
		if e.exists(k.ClaimGrant()) || e.hgetall(k.Core())["lifecycle_phase"] != "runnable" {
			t.Error("writes left after bad policy")
		}
		_, err = e.c.IssueGrantAndClaim(e.ctx, &valkey.IssueGrantAndClaimParams{ExecutionID: e.newEID(), LeaseTTLMs: 1})
		schedWantCode(t, err, valkey.CodeExecutionNotFound)
	})
}
