package valkey_test

import (
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// TestSchedulingWithRealCreateAndClaim drives the family over executions
// made by ff_create_execution and claimed by ff_claim_execution.
func TestSchedulingWithRealCreateAndClaim(t *testing.T) {
	t.Parallel()

	t.Run("DelayedPromoteGrantClaimRenewRevokeReclaimGrant", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		now := e.now()
		res, err := e.c.CreateExecution(e.ctx, &valkey.CreateExecutionParams{
			ExecutionID: eid, Namespace: "ns", LaneID: "default", ExecutionKind: "k", Priority: 5,
			CreatorIdentity: "t", PolicyJSON: "{}", DelayUntil: now + 60000,
		})
		if err != nil || res.PublicState != "delayed" {
			t.Fatalf("create = %+v, %v", res, err)
		}
		st, err := e.c.PromoteDelayed(e.ctx, &valkey.PromoteDelayedParams{ExecutionID: eid, Lane: "default", NowMs: now})
		if err != nil || st != valkey.PromoteNotYetDue {
			t.Fatalf("early promote = %s, %v", st, err)
		}
		st, err = e.c.PromoteDelayed(e.ctx, &valkey.PromoteDelayedParams{ExecutionID: eid, Lane: "default", NowMs: now + 60000})
		if err != nil || st != valkey.PromotePromoted {
			t.Fatalf("promote = %s, %v", st, err)
		}
		if got := e.hgetall(model.KeysFor(eid).Core())["attempt_state"]; got != "pending_first_attempt" {
			t.Errorf("attempt_state after promote = %q", got)
		}
		if err := e.c.IssueClaimGrant(e.ctx, grantParams(eid, "default")); err != nil {
			t.Fatal(err)
		}
		cl, err := e.c.ClaimExecution(e.ctx, &valkey.ClaimExecutionParams{
			ExecutionID: eid, WorkerID: "w1", WorkerInstanceID: "wi1", LaneID: "default", LeaseTTLMs: 30000,
		})
		if err != nil {
			t.Fatal(err)
		}
		exp, err := e.c.RenewLease(e.ctx, &valkey.RenewLeaseParams{
			ExecutionID: eid, AttemptIndex: cl.AttemptIndex, AttemptID: cl.AttemptID, LeaseID: cl.LeaseID,
			LeaseEpoch: cl.LeaseEpoch, LeaseTTLMs: 45000, HistoryGraceMs: 5000,
		})
		if err != nil || exp < cl.ExpiresAt {
			t.Fatalf("renew = %d, %v (claim expiry %d)", exp, err, cl.ExpiresAt)
		}
		if err := e.c.UpdateProgress(e.ctx, &valkey.UpdateProgressParams{
			ExecutionID: eid, LeaseID: cl.LeaseID, LeaseEpoch: cl.LeaseEpoch, Pct: "10"}); err != nil {
			t.Fatal(err)
		}
		rv, err := e.c.RevokeLease(e.ctx, &valkey.RevokeLeaseParams{ExecutionID: eid, ExpectedLeaseID: cl.LeaseID})
		if err != nil || rv.Reason != "revoked" {
			t.Fatalf("revoke = %+v, %v", rv, err)
		}
		// The wrapper pre-read the holder's instance id for KEYS[5].
		if e.sismember(model.KeysOn(eid.Partition()).WorkerLeases("wi1"), string(eid)) {
			t.Error("holder's worker set still has the execution")
		}
		if _, err := e.c.IssueReclaimGrant(e.ctx, grantParams(eid, "default")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("SeedMatchesCreateFieldSet", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		real, seeded := e.newEID(), e.newEID()
		if _, err := e.c.CreateExecution(e.ctx, &valkey.CreateExecutionParams{
			ExecutionID: real, Namespace: "ns", LaneID: "default", ExecutionKind: "k", CreatorIdentity: "t", PolicyJSON: "{}",
		}); err != nil {
			t.Fatal(err)
		}
		e.seedRunnable(seeded, "default", nil)
		a, b := e.hgetall(model.KeysFor(real).Core()), e.hgetall(model.KeysFor(seeded).Core())
		for f := range a {
			if _, ok := b[f]; !ok {
				t.Errorf("seed lacks field %s", f)
			}
		}
		for f := range b {
			if _, ok := a[f]; !ok {
				t.Errorf("seed has extra field %s", f)
			}
		}
	})

	t.Run("RequiredCapabilitiesFromPolicy", func(t *testing.T) {
		t.Parallel()
		e := newSchedEnv(t)
		eid := e.newEID()
		if _, err := e.c.CreateExecution(e.ctx, &valkey.CreateExecutionParams{
			ExecutionID: eid, Namespace: "ns", LaneID: "default", ExecutionKind: "k", CreatorIdentity: "t",
			PolicyJSON: `{"routing_requirements":{"required_capabilities":["gpu","linux"]}}`,
		}); err != nil {
			t.Fatal(err)
		}
		p := grantParams(eid, "default")
		p.WorkerCapabilities = []string{"linux"}
		le := schedWantCode(t, e.c.IssueClaimGrant(e.ctx, p), valkey.CodeCapabilityMismatch)
		if le.Detail(0) != "gpu" {
			t.Errorf("missing = %q", le.Detail(0))
		}
		p.WorkerCapabilities = []string{"linux", "gpu"}
		if err := e.c.IssueClaimGrant(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		res, err := e.c.ChangePriority(e.ctx, eid, 100)
		if err != nil || res.Old != 0 || res.New != 100 {
			t.Fatalf("change priority = %+v, %v", res, err)
		}
	})
}
