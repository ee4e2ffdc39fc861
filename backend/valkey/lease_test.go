package valkey_test

import (
	"strconv"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// claimedExec seeds a runnable execution and claims it through
// ff_issue_grant_and_claim (worker w1 / wi1, lease ttl 30s).
type claimedExec struct {
	eid   model.ExecutionID
	lane  string
	claim *valkey.GrantAndClaimResult
	core  map[string]string
}

func (e *schedEnv) claimed(over map[string]string) *claimedExec {
	e.t.Helper()
	eid := e.newEID()
	e.seedRunnable(eid, "default", over)
	res, err := e.c.IssueGrantAndClaim(e.ctx, &valkey.IssueGrantAndClaimParams{
		ExecutionID: eid, WorkerID: "w1", WorkerInstanceID: "wi1", Lane: "default",
		LeaseID: "lease-1", LeaseTTLMs: 30000, AttemptID: "att-1",
	})
	if err != nil {
		e.t.Fatalf("claim: %v", err)
	}
	return &claimedExec{eid: eid, lane: "default", claim: res, core: e.hgetall(model.KeysFor(eid).Core())}
}

func (c *claimedExec) renewArgs(ttl string) []string {
	return []string{string(c.eid), c.core["current_attempt_index"], c.core["current_attempt_id"],
		c.core["current_lease_id"], c.core["current_lease_epoch"], ttl, "5000"}
}

func renewKeys(eid model.ExecutionID) []string {
	k := model.KeysFor(eid)
	return []string{k.Core(), k.LeaseCurrent(), k.LeaseHistory(), model.KeysOn(k.Partition()).LeaseExpiry()}
}

func TestRenewLease(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		x := e.claimed(nil)
		k := model.KeysFor(x.eid)
		idx := model.KeysOn(x.eid.Partition())
		activeBefore, _ := e.zscore(idx.LaneActive("default"), string(x.eid))
		if pt := e.pexpiretime(k.LeaseCurrent()); pt != -1 {
			t.Errorf("lease_current has a TTL before the first renew: %d", pt)
		}
		before := e.now()
		exp, err := e.c.RenewLease(e.ctx, &valkey.RenewLeaseParams{
			ExecutionID: x.eid, AttemptIndex: 0, AttemptID: "att-1", LeaseID: "lease-1", LeaseEpoch: 1,
			LeaseTTLMs: 60000, HistoryGraceMs: 5000,
		})
		if err != nil {
			t.Fatal(err)
		}
		core := e.hgetall(k.Core())
		now, _ := strconv.ParseInt(core["lease_last_renewed_at"], 10, 64)
		if now < before || exp != now+60000 {
			t.Fatalf("expires %d, renewed at %d (before %d)", exp, now, before)
		}
		es, ns, rs := strconv.FormatInt(exp, 10), strconv.FormatInt(now, 10), strconv.FormatInt(now+40000, 10)
		schedWantFields(t, "core", core, map[string]string{
			"lease_expires_at": es, "lease_renewal_deadline": rs, "last_mutation_at": ns,
			"current_lease_id": "lease-1", "current_lease_epoch": "1", "ownership_state": "leased",
		})
		schedWantFields(t, "lease_current", e.hgetall(k.LeaseCurrent()), map[string]string{
			"expires_at": es, "renewal_deadline": rs, "last_renewed_at": ns, "lease_id": "lease-1",
		})
		if pt := e.pexpiretime(k.LeaseCurrent()); pt != exp+5000 {
			t.Errorf("lease_current PEXPIRETIME = %d, want %d", pt, exp+5000)
		}
		if sc, _ := e.zscore(idx.LeaseExpiry(), string(x.eid)); int64(sc) != exp {
			t.Errorf("lease_expiry score = %v, want %d", sc, exp)
		}
		if sc, _ := e.zscore(idx.LaneActive("default"), string(x.eid)); sc != activeBefore {
			t.Errorf("lane:active rescored on renew: %v -> %v", activeBefore, sc)
		}
		if h := e.xrange(k.LeaseHistory()); len(h) != 1 {
			t.Errorf("renew logged history: %v", h)
		}
	})

	t.Run("Fencing", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name string
			mod  func(a []string)
			code valkey.ErrorCode
		}{
			{"StaleEpoch", func(a []string) { a[4] = "7" }, valkey.CodeStaleLease},
			{"StaleAttemptIndex", func(a []string) { a[1] = "3" }, valkey.CodeStaleLease},
			{"StaleAttemptID", func(a []string) { a[2] = "att-other" }, valkey.CodeStaleLease},
			{"StaleLeaseID", func(a []string) { a[3] = "lease-other" }, valkey.CodeStaleLease},
			{"PartialNoLeaseID", func(a []string) { a[3] = "" }, valkey.CodePartialFenceTriple},
			{"PartialNoEpoch", func(a []string) { a[4] = "" }, valkey.CodePartialFenceTriple},
			{"PartialNoAttemptID", func(a []string) { a[2] = "" }, valkey.CodePartialFenceTriple},
			{"Empty", func(a []string) { a[2], a[3], a[4] = "", "", "" }, valkey.CodeFenceRequired},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				x := e.claimed(nil)
				a := x.renewArgs("1000")
				tc.mod(a)
				_, err := e.fcall("ff_renew_lease", renewKeys(x.eid), a)
				schedWantCode(t, err, tc.code)
				if got := e.hgetall(model.KeysFor(x.eid).Core()); got["lease_expires_at"] != x.core["lease_expires_at"] {
					t.Error("lease extended on a fencing error")
				}
			})
		}
	})

	t.Run("Revoked", func(t *testing.T) {
		t.Parallel()
		for name, over := range map[string]map[string]string{
			"OwnershipRevoked": {"ownership_state": "lease_revoked"},
			"RevokedAtSet":     {"lease_revoked_at": "123"},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				x := e.claimed(nil)
				e.hset(model.KeysFor(x.eid).Core(), over)
				_, err := e.fcall("ff_renew_lease", renewKeys(x.eid), x.renewArgs("1000"))
				schedWantCode(t, err, valkey.CodeLeaseRevoked)
			})
		}
	})

	t.Run("ExpiredMarksCore", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		x := e.claimed(nil)
		k := model.KeysFor(x.eid)
		e.hset(k.Core(), map[string]string{"lease_expires_at": strconv.FormatInt(e.now()-1, 10)})
		_, err := e.fcall("ff_renew_lease", renewKeys(x.eid), x.renewArgs("1000"))
		schedWantCode(t, err, valkey.CodeLeaseExpired)
		core := e.hgetall(k.Core())
		schedWantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "active", "ownership_state": "lease_expired_reclaimable",
			"blocking_reason": "waiting_for_worker", "blocking_detail": "lease expired, awaiting reclaim",
			"attempt_state": "attempt_interrupted", "public_state": "active",
		})
		if core["lease_expired_at"] == "" {
			t.Error("lease_expired_at not set")
		}
		h := e.xrange(k.LeaseHistory())
		if len(h) != 2 || h[1]["event"] != "expired" || h[1]["lease_id"] != "lease-1" {
			t.Errorf("history = %v", h)
		}
	})

	t.Run("NotActive", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		x := e.claimed(nil)
		e.hset(model.KeysFor(x.eid).Core(), map[string]string{"lifecycle_phase": "terminal", "terminal_outcome": "success"})
		_, err := e.fcall("ff_renew_lease", renewKeys(x.eid), x.renewArgs("1000"))
		le := schedWantCode(t, err, valkey.CodeExecutionNotActive)
		if len(le.Details) != 4 || le.Details[0] != "success" || le.Details[1] != "1" || le.Details[2] != "terminal" || le.Details[3] != "att-1" {
			t.Errorf("details = %v", le.Details)
		}
	})

	t.Run("NotFoundAndBadInput", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		_, err := e.fcall("ff_renew_lease", renewKeys(eid), []string{string(eid), "0", "a", "l", "1", "1000", "5000"})
		schedWantCode(t, err, valkey.CodeExecutionNotFound)
		_, err = e.fcall("ff_renew_lease", renewKeys(eid), []string{string(eid), "0", "a", "l", "1", "x", "5000"})
		schedWantCode(t, err, valkey.CodeInvalidInput)
		_, err = e.fcall("ff_renew_lease", renewKeys(eid), []string{string(eid), "0", "a", "l", "1", "1000", ""})
		schedWantCode(t, err, valkey.CodeInvalidInput)
		_, err = e.fcall("ff_renew_lease", renewKeys(eid), []string{string(eid)})
		schedWantCode(t, err, valkey.CodeInvalidInput)
	})
}

func TestMarkLeaseExpiredIfDue(t *testing.T) {
	t.Parallel()

	t.Run("MarksAndKeepsIndex", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		x := e.claimed(nil)
		k := model.KeysFor(x.eid)
		idx := model.KeysOn(x.eid.Partition())
		e.hset(k.Core(), map[string]string{"lease_expires_at": strconv.FormatInt(e.now()-5, 10)})
		res, err := e.c.MarkLeaseExpiredIfDue(e.ctx, &valkey.MarkLeaseExpiredIfDueParams{ExecutionID: x.eid})
		if err != nil || res.Status != "OK" || res.Reason != "marked_expired" {
			t.Fatalf("mark = %+v, %v", res, err)
		}
		schedWantFields(t, "core", e.hgetall(k.Core()), map[string]string{
			"ownership_state": "lease_expired_reclaimable", "attempt_state": "attempt_interrupted",
			"eligibility_state": "not_applicable", "terminal_outcome": "none",
		})
		if _, ok := e.zscore(idx.LeaseExpiry(), string(x.eid)); !ok {
			t.Error("eid removed from lease_expiry")
		}
		if !e.sismember(idx.WorkerLeases("wi1"), string(x.eid)) {
			t.Error("eid removed from worker leases")
		}
		h := e.xrange(k.LeaseHistory())
		if len(h) != 2 {
			t.Fatalf("history = %v", h)
		}
		schedWantFields(t, "expired event", h[1], map[string]string{
			"event": "expired", "lease_id": "lease-1", "lease_epoch": "1", "attempt_index": "0",
			"attempt_id": "att-1", "worker_id": "w1", "worker_instance_id": "wi1",
		})
		// Second call: already_expired, still indexed.
		res, err = e.c.MarkLeaseExpiredIfDue(e.ctx, &valkey.MarkLeaseExpiredIfDueParams{ExecutionID: x.eid})
		if err != nil || res.Status != "ALREADY_SATISFIED" || res.Reason != "already_expired" {
			t.Fatalf("second mark = %+v, %v", res, err)
		}
		if _, ok := e.zscore(idx.LeaseExpiry(), string(x.eid)); !ok {
			t.Error("eid removed from lease_expiry on already_expired")
		}
	})

	t.Run("AlreadySatisfied", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name    string
			over    map[string]string
			missing bool
			reason  string
			removed bool
		}{
			{"NotFound", nil, true, "execution_not_found", true},
			{"NotActive", map[string]string{"lifecycle_phase": "terminal"}, false, "not_active", true},
			{"AlreadyRevoked", map[string]string{"ownership_state": "lease_revoked"}, false, "already_revoked", false},
			{"Unowned", map[string]string{"ownership_state": "unowned"}, false, "unowned", true},
			{"NotYetExpired", nil, false, "not_yet_expired", false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newSchedEnv(t)
				var eid model.ExecutionID
				idx := model.KeysOn(model.Partition{})
				if tc.missing {
					eid = e.newEID()
					idx = model.KeysOn(eid.Partition())
					e.zadd(idx.LeaseExpiry(), 1, string(eid))
				} else {
					x := e.claimed(nil)
					eid = x.eid
					idx = model.KeysOn(eid.Partition())
					if tc.over != nil {
						e.hset(model.KeysFor(eid).Core(), tc.over)
					}
				}
				before := e.hgetall(model.KeysFor(eid).Core())
				res, err := e.c.MarkLeaseExpiredIfDue(e.ctx, &valkey.MarkLeaseExpiredIfDueParams{ExecutionID: eid})
				if err != nil || res.Status != "ALREADY_SATISFIED" || res.Reason != tc.reason {
					t.Fatalf("mark = %+v, %v; want %s", res, err, tc.reason)
				}
				if _, ok := e.zscore(idx.LeaseExpiry(), string(eid)); ok == tc.removed {
					t.Errorf("in lease_expiry = %v, want %v", ok, !tc.removed)
				}
				if after := e.hgetall(model.KeysFor(eid).Core()); after["last_mutation_at"] != before["last_mutation_at"] || after["ownership_state"] != before["ownership_state"] {
					t.Error("core changed")
				}
			})
		}
	})

	t.Run("GarbageMember", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		p := model.Partition{Family: model.FamilyFlow, Index: 9}
		e.zadd(model.KeysOn(p).LeaseExpiry(), 1, "garbage:member")
		res, err := e.c.MarkLeaseExpiredIfDue(e.ctx, &valkey.MarkLeaseExpiredIfDueParams{ExecutionID: "garbage:member", Partition: &p})
		if err != nil || res.Reason != "execution_not_found" {
			t.Fatalf("mark garbage = %+v, %v", res, err)
		}
		if _, ok := e.zscore(model.KeysOn(p).LeaseExpiry(), "garbage:member"); ok {
			t.Error("garbage left in lease_expiry")
		}
		// No ARGV at all: still a clean reply.
		_, err = e.fcall("ff_mark_lease_expired_if_due",
			[]string{"ff:exec:{fp:9}:x:core", "ff:exec:{fp:9}:x:lease:current", model.KeysOn(p).LeaseExpiry(), "ff:exec:{fp:9}:x:lease:history"}, nil)
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestRevokeLease(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		x := e.claimed(nil)
		k := model.KeysFor(x.eid)
		idx := model.KeysOn(x.eid.Partition())
		res, err := e.c.RevokeLease(e.ctx, &valkey.RevokeLeaseParams{ExecutionID: x.eid, ExpectedLeaseID: "lease-1", Reason: "drain"})
		if err != nil || res.Status != "OK" || res.Reason != "revoked" || res.LeaseID != "lease-1" || res.LeaseEpoch != "1" {
			t.Fatalf("revoke = %+v, %v", res, err)
		}
		core := e.hgetall(k.Core())
		schedWantFields(t, "core", core, map[string]string{
			"lifecycle_phase": "active", "ownership_state": "lease_revoked", "eligibility_state": "not_applicable",
			"blocking_reason": "waiting_for_worker", "blocking_detail": "lease revoked: drain",
			"terminal_outcome": "none", "attempt_state": "attempt_interrupted", "public_state": "active",
			"lease_revoke_reason": "drain", "current_lease_id": "lease-1",
		})
		if core["lease_revoked_at"] == "" || core["lease_revoked_at"] != core["last_mutation_at"] {
			t.Errorf("lease_revoked_at %q last_mutation_at %q", core["lease_revoked_at"], core["last_mutation_at"])
		}
		if e.exists(k.LeaseCurrent()) {
			t.Error("lease_current not deleted")
		}
		if _, ok := e.zscore(idx.LeaseExpiry(), string(x.eid)); ok {
			t.Error("still in lease_expiry")
		}
		if e.sismember(idx.WorkerLeases("wi1"), string(x.eid)) {
			t.Error("still in worker leases")
		}
		if _, ok := e.zscore(idx.LaneActive("default"), string(x.eid)); !ok {
			t.Error("revoke must not touch lane:active")
		}
		h := e.xrange(k.LeaseHistory())
		if len(h) != 2 {
			t.Fatalf("history = %v", h)
		}
		schedWantFields(t, "revoked event", h[1], map[string]string{
			"event": "revoked", "lease_id": "lease-1", "lease_epoch": "1", "attempt_index": "0",
			"attempt_id": "att-1", "worker_id": "w1", "worker_instance_id": "wi1", "reason": "drain",
			"ts": core["lease_revoked_at"],
		})
		// Renew after revoke: lease_revoked.
		_, err = e.fcall("ff_renew_lease", renewKeys(x.eid), x.renewArgs("1000"))
		schedWantCode(t, err, valkey.CodeLeaseRevoked)
		// Revoke again: already_revoked.
		res, err = e.c.RevokeLease(e.ctx, &valkey.RevokeLeaseParams{ExecutionID: x.eid})
		if err != nil || res.Status != "ALREADY_SATISFIED" || res.Reason != "already_revoked" {
			t.Fatalf("second revoke = %+v, %v", res, err)
		}
	})

	t.Run("DefaultReasonWhenSlotMissing", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		x := e.claimed(nil)
		k := model.KeysFor(x.eid)
		idx := model.KeysOn(x.eid.Partition())
		rep, err := e.fcall("ff_revoke_lease",
			[]string{k.Core(), k.LeaseCurrent(), k.LeaseHistory(), idx.LeaseExpiry(), idx.WorkerLeases("wi1")},
			[]string{string(x.eid)})
		if err != nil || rep.Field(0) != "revoked" {
			t.Fatalf("revoke = %+v, %v", rep, err)
		}
		schedWantFields(t, "core", e.hgetall(k.Core()), map[string]string{
			"lease_revoke_reason": "operator", "blocking_detail": "lease revoked: operator"})
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		// Not found.
		_, err := e.c.RevokeLease(e.ctx, &valkey.RevokeLeaseParams{ExecutionID: e.newEID()})
		schedWantCode(t, err, valkey.CodeExecutionNotFound)
		// Not active.
		eid := e.newEID()
		e.seedRunnable(eid, "default", nil)
		_, err = e.c.RevokeLease(e.ctx, &valkey.RevokeLeaseParams{ExecutionID: eid})
		le := schedWantCode(t, err, valkey.CodeExecutionNotActive)
		if len(le.Details) != 4 || le.Details[2] != "runnable" || le.Details[0] != "none" {
			t.Errorf("details = %v", le.Details)
		}
		// Stale expected lease id.
		x := e.claimed(nil)
		_, err = e.c.RevokeLease(e.ctx, &valkey.RevokeLeaseParams{ExecutionID: x.eid, ExpectedLeaseID: "lease-9"})
		le = schedWantCode(t, err, valkey.CodeStaleLease)
		if le.Detail(0) != "expected lease-9 but current is lease-1" {
			t.Errorf("detail = %q", le.Detail(0))
		}
		if e.hgetall(model.KeysFor(x.eid).Core())["ownership_state"] != "leased" {
			t.Error("revoked despite stale expected id")
		}
		// Already expired.
		y := e.claimed(map[string]string{})
		e.hset(model.KeysFor(y.eid).Core(), map[string]string{"ownership_state": "lease_expired_reclaimable"})
		res, err := e.c.RevokeLease(e.ctx, &valkey.RevokeLeaseParams{ExecutionID: y.eid})
		if err != nil || res.Status != "ALREADY_SATISFIED" || res.Reason != "already_expired" {
			t.Fatalf("revoke expired = %+v, %v", res, err)
		}
		// Active but unowned: no_active_lease.
		z := e.claimed(nil)
		e.hset(model.KeysFor(z.eid).Core(), map[string]string{"ownership_state": "unowned"})
		_, err = e.c.RevokeLease(e.ctx, &valkey.RevokeLeaseParams{ExecutionID: z.eid})
		schedWantCode(t, err, valkey.CodeNoActiveLease)
	})
}
