package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// joinFlow creates a flow with n parents and a child joined by join, and
// claims every parent with a worker that resolves dependencies.
func joinFlow(t *testing.T, b *testBundle, lane string, n int, join sdk.Join) (*sdk.Flow, map[model.ExecutionID]*sdk.Lease, []model.ExecutionID, model.ExecutionID) {
	t.Helper()
	f, err := b.c.CreateFlow(b.ctx, "join")
	if err != nil {
		t.Fatal(err)
	}
	var parents []model.ExecutionID
	for range n {
		id, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: lane, Kind: "parent"})
		if err != nil {
			t.Fatal(err)
		}
		parents = append(parents, id)
	}
	child, err := f.AddJoin(b.ctx, sdk.ExecutionSpec{Lane: lane, Kind: "child"}, join, parents...)
	if err != nil {
		t.Fatal(err)
	}
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{lane}, ResolveDependencies: true})
	leases := map[model.ExecutionID]*sdk.Lease{}
	valkeytest.Eventually(t, 30*time.Second, "all parents claimed", func() bool {
		if l := b.claim(t, w); l != nil {
			if l.ID == child {
				t.Fatal("child claimed before any parent finished")
			}
			leases[l.ID] = l
		}
		return len(leases) == n
	})
	return f, leases, parents, child
}

func TestFlowJoins(t *testing.T) {
	t.Parallel()

	t.Run("AnyOfLetRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		_, leases, parents, child := joinFlow(t, b, "anyof", 3, sdk.AnyOf(sdk.LetRun))
		if s := b.state(t, child); s.EligibilityState != model.EligibleBlockedByDeps {
			t.Fatalf("child before: %s", s.EligibilityState)
		}
		if err := leases[parents[1]].Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, child); s.EligibilityState != model.EligibleNow {
			t.Fatalf("child after the first success: %s", s.EligibilityState)
		}
		for _, p := range []model.ExecutionID{parents[0], parents[2]} {
			if s := b.state(t, p); s.PublicState != model.PublicActive {
				t.Fatalf("let_run sibling %s: %s", p, s.PublicState)
			}
			if _, err := leases[p].Fail(b.ctx, "late loser", sdk.CategoryPermanent, false); err != nil {
				t.Fatal(err)
			}
		}
		if s := b.state(t, child); s.EligibilityState != model.EligibleNow || s.Terminal() {
			t.Fatalf("child after the losers failed: %s %s", s.EligibilityState, s.PublicState)
		}
	})

	t.Run("AnyOfCancelRemainingQueuesSiblingCancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		f, leases, parents, child := joinFlow(t, b, "anyofc", 2, sdk.AnyOf(sdk.CancelRemaining))
		if err := leases[parents[0]].Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, child); s.EligibilityState != model.EligibleNow {
			t.Fatalf("child: %s", s.EligibilityState)
		}
		// The cancel of the still-running sibling is queued for the
		// host's edge_cancel dispatcher.
		raw := b.vc.Raw()
		fk := model.FlowKeysFor(b.c.Partitions().FlowPartition(f.ID), f.ID)
		g, err := raw.Do(b.ctx, raw.B().Hgetall().Key(fk.EdgeGroup(child)).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		if g["group_state"] != "satisfied" || g["on_satisfied"] != "cancel_remaining" || g["cancel_siblings_pending_flag"] != "true" {
			t.Fatalf("edge group = %v", g)
		}
		n, err := raw.Do(b.ctx, raw.B().Scard().Key(model.KeysOn(child.Partition()).PendingCancelGroups()).Build()).AsInt64()
		if err != nil || n != 1 {
			t.Fatalf("pending cancel groups = %d, %v", n, err)
		}
	})

	t.Run("QuorumTwoOfThree", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		_, leases, parents, child := joinFlow(t, b, "quorum", 3, sdk.Quorum(2, sdk.LetRun))
		if err := leases[parents[0]].Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, child); s.EligibilityState != model.EligibleBlockedByDeps {
			t.Fatalf("child after 1 of 2: %s", s.EligibilityState)
		}
		if err := leases[parents[2]].Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, child); s.EligibilityState != model.EligibleNow {
			t.Fatalf("child after 2 of 2: %s", s.EligibilityState)
		}
	})

	t.Run("QuorumImpossibleSkipsChild", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		_, leases, parents, child := joinFlow(t, b, "quorumx", 2, sdk.Quorum(2, sdk.LetRun))
		if _, err := leases[parents[0]].Fail(b.ctx, "broken", sdk.CategoryPermanent, false); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, child); s.PublicState != model.PublicSkipped {
			t.Fatalf("child of an impossible quorum: %s", s.PublicState)
		}
	})

	t.Run("InvalidJoinsRejectedBeforeCreating", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		f, err := b.c.CreateFlow(b.ctx, "bad")
		if err != nil {
			t.Fatal(err)
		}
		p, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: "bad"})
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]struct {
			join    sdk.Join
			parents []model.ExecutionID
		}{
			"ZeroJoin":      {sdk.Join{}, []model.ExecutionID{p}},
			"QuorumZero":    {sdk.Quorum(0, sdk.LetRun), []model.ExecutionID{p}},
			"QuorumTooBig":  {sdk.Quorum(2, sdk.LetRun), []model.ExecutionID{p}},
			"BadSiblings":   {sdk.AnyOf("whatever"), []model.ExecutionID{p}},
			"AnyOfNoParent": {sdk.AnyOf(sdk.LetRun), nil},
		} {
			if _, err := f.AddJoin(b.ctx, sdk.ExecutionSpec{Lane: "bad"}, c.join, c.parents...); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Errorf("%s: err = %v, want ErrInvalidInput", name, err)
			}
		}
		raw := b.vc.Raw()
		n, err := raw.Do(b.ctx, raw.B().Scard().Key(model.KeysOn(p.Partition()).AllExecutions()).Build()).AsInt64()
		if err != nil || n != 1 {
			t.Fatalf("%d executions after the rejected joins (%v), want only the parent", n, err)
		}
	})
}
