package valkey_test

import (
	"testing"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// End to end with the execution family: real create / claim / complete /
// fail, the completion messages they publish, and the router cascade.
func TestFlowWithRealExecutions(t *testing.T) {
	t.Parallel()
	b := setupExec(t)
	c, ctx := b.c, b.ctx
	wait := famCompletions(t, c)
	flow, fk := famFlow(t, c)
	mk := func() model.ExecutionID {
		eid := b.create(&valkey.CreateExecutionParams{ExecutionID: c.Partitions().NewFlowExecutionID(flow)})
		if _, _, err := c.AddExecutionToFlow(ctx, flow, eid, 0); err != nil {
			t.Fatal(err)
		}
		return eid
	}
	a, x, d := mk(), mk(), mk()
	ad := famEdge(t, c, flow, a, d, "a.out")
	famEdge(t, c, flow, x, d, "")
	pk := model.KeysOn(c.Partitions().FlowPartition(flow))
	if _, ok := famScore(t, c, pk.LaneEligible("default"), string(d)); ok {
		t.Fatal("D eligible before its upstreams")
	}

	// A completes for real; the message names it; the cascade resolves A→D.
	claim := b.claim(a)
	if err := c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: a, Result: "42",
		Fence: valkey.LeaseFence{LeaseID: claim.LeaseID, LeaseEpoch: claim.LeaseEpoch, AttemptID: claim.AttemptID}}); err != nil {
		t.Fatal(err)
	}
	if msg := wait(a); msg["outcome"] != "success" || msg["flow_id"] != flow.String() {
		t.Fatalf("completion of A = %v", msg)
	}
	if _, err := c.CascadeCompletion(ctx, flow, a, b.now()); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, model.KeysFor(d).DepEdge(ad.String()), map[string]string{"state": "satisfied"})
	if famGet(t, c, model.KeysFor(d).Payload()) != "42" {
		t.Fatal("A's result not injected into D")
	}

	// X fails terminally: D is skipped and announced.
	claim = b.claim(x)
	if _, err := c.FailExecution(ctx, &valkey.FailExecutionParams{ExecutionID: x, FailureReason: "boom",
		Fence: valkey.LeaseFence{LeaseID: claim.LeaseID, LeaseEpoch: claim.LeaseEpoch, AttemptID: claim.AttemptID}}); err != nil {
		t.Fatal(err)
	}
	if msg := wait(x); msg["outcome"] != "failed" {
		t.Fatalf("completion of X = %v", msg)
	}
	if _, err := c.CascadeCompletion(ctx, flow, x, b.now()); err != nil {
		t.Fatal(err)
	}
	if msg := wait(d); msg["outcome"] != "skipped" {
		t.Fatalf("completion of D = %v", msg)
	}
	famWantFields(t, c, model.KeysFor(d).Core(), map[string]string{"terminal_outcome": "skipped", "public_state": "skipped"})

	// Replay the failed upstream (normal path) and the skipped child.
	if n, err := c.ReplayExecution(ctx, x, 0); err != nil || n != 0 {
		t.Fatalf("replay X = %d %v", n, err)
	}
	famWantFields(t, c, model.KeysFor(x).Core(), map[string]string{"attempt_state": "pending_replay_attempt", "public_state": "waiting"})
	if n, err := c.ReplayExecution(ctx, d, 0); err != nil || n != 1 {
		t.Fatalf("replay D = %d %v", n, err)
	}
	famWantFields(t, c, model.KeysFor(d).Core(), map[string]string{"eligibility_state": "blocked_by_dependencies"})
	// The replayed X completes: D is eligible again.
	claim = b.claim(x)
	if err := c.CompleteExecution(ctx, &valkey.CompleteExecutionParams{ExecutionID: x,
		Fence: valkey.LeaseFence{LeaseID: claim.LeaseID, LeaseEpoch: claim.LeaseEpoch, AttemptID: claim.AttemptID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CascadeCompletion(ctx, flow, x, b.now()); err != nil {
		t.Fatal(err)
	}
	famWantFields(t, c, model.KeysFor(d).Core(), map[string]string{"eligibility_state": "eligible_now", "attempt_state": "pending_replay_attempt"})
	if _, ok := famScore(t, c, pk.LaneEligible("default"), string(d)); !ok {
		t.Fatal("D not eligible after the replayed upstream completed")
	}
	_ = fk
}
