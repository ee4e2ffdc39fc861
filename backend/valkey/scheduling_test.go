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
