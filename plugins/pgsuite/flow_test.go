package pgsuite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// flowFixture builds flows on Postgres the way upstream's flow staging
// leaves them (fabric has no flow API on Postgres yet): members created
// on the flow's partition, edges, and one edge group per downstream with
// running_count = its number of upstreams.
type flowFixture struct {
	t    *testing.T
	c    *postgres.Client
	flow model.UUID
}

// member creates a flow member on its own lane; blocked members wait for
// their dependencies (runnable / blocked_by_dependencies).
func (f *flowFixture) member(lane string, blocked bool) model.ExecutionID {
	t := f.t
	t.Helper()
	id := parts.NewFlowExecutionID(f.flow)
	ctx := context.Background()
	if _, err := f.c.CreateExecution(ctx, &postgres.CreateExecutionParams{
		ExecutionID: id, FlowID: f.flow, Namespace: "ns", LaneID: lane, ExecutionKind: "test",
	}); err != nil {
		t.Fatal(err)
	}
	if blocked {
		if _, err := f.c.Pool().Exec(ctx, `UPDATE ff_exec_core SET eligibility_state = 'blocked_by_dependencies',
  public_state = 'waiting_children', blocking_reason = 'waiting_for_children' WHERE execution_id = $1::uuid`, id.UUIDString()); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// group stages the edges ups → down under policy.
func (f *flowFixture) group(down model.ExecutionID, policy string, ups ...model.ExecutionID) {
	t := f.t
	t.Helper()
	ctx := context.Background()
	pk := int16(down.Partition().Index)
	for _, up := range ups {
		if _, err := f.c.Pool().Exec(ctx, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy)
  VALUES ($1, $2::uuid, gen_random_uuid(), $3::uuid, $4::uuid, '{"edge_state":"applied"}')`,
			pk, f.flow.String(), up.UUIDString(), down.UUIDString()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.c.Pool().Exec(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, policy, running_count)
  VALUES ($1, $2::uuid, $3::uuid, $4::jsonb, $5)`, pk, f.flow.String(), down.UUIDString(), policy, len(ups)); err != nil {
		t.Fatal(err)
	}
}

// flowSnapshot is every row the two flow plugins write, as text.
func flowSnapshot(t *testing.T, c *postgres.Client) string {
	t.Helper()
	var s string
	err := c.Pool().QueryRow(context.Background(), `SELECT
  (SELECT COALESCE(string_agg(row_to_json(x)::text, ',' ORDER BY execution_id), '') FROM ff_exec_core x) || '|' ||
  (SELECT COALESCE(string_agg(row_to_json(a)::text, ',' ORDER BY execution_id, attempt_index), '') FROM ff_attempt a) || '|' ||
  (SELECT COALESCE(string_agg(row_to_json(g)::text, ',' ORDER BY downstream_eid), '') FROM ff_edge_group g) || '|' ||
  (SELECT COALESCE(string_agg(execution_id::text || ':' || outcome || ':' || (dispatched_at_ms IS NOT NULL)::text, ',' ORDER BY event_id), '')
     FROM ff_completion_event) || '|' ||
  (SELECT count(*) FROM ff_pending_cancel_groups)::text || '|' ||
  (SELECT count(*) FROM ff_lease_event)::text`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFlowReconcilerPlugins runs pg_dependency_reconciler and
// pg_edge_cancel_reconciler on one database. Nothing dispatches the
// completion events the worker operations write (a lost completion, as
// after a dispatcher crash); the plugins must repair every flow: a
// satisfied child becomes claimable, a child whose all_of parent failed is
// skipped and its own child after it, an any_of winner releases its child
// and its losers are cancelled, stale and orphaned pending groups go, and
// more passes change nothing.
func TestFlowReconcilerPlugins(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 3*time.Minute)
	pool := c.Pool()
	f := &flowFixture{t: t, c: c, flow: model.NewUUID()}
	part := parts.FlowPartition(f.flow)

	// P1 → C1 (all_of): P1 succeeds.
	p1, c1 := f.member("f-p1", false), f.member("f-c1", true)
	f.group(c1, `{"kind":"all_of"}`, p1)
	// P2 → C2 → G2 (all_of): P2 fails.
	p2, c2, g2 := f.member("f-p2", false), f.member("f-c2", true), f.member("f-g2", true)
	f.group(c2, `{"kind":"all_of"}`, p2)
	f.group(g2, `{"kind":"all_of"}`, c2)
	// W, L1, L2 → D (any_of, cancel the rest): W wins while L1 runs.
	w, l1, l2, d := f.member("f-w", false), f.member("f-l1", false), f.member("f-l2", false), f.member("f-d", true)
	f.group(d, `{"kind":"any_of","on_satisfied":"cancel_remaining"}`, w, l1, l2)
	// A pending row whose group is not flagged, and one with no group.
	stale, orphan := f.member("f-s", true), model.NewUUID()
	f.group(stale, `{"kind":"any_of"}`, p1)
	for _, down := range []string{stale.UUIDString(), orphan.String()} {
		if _, err := pool.Exec(ctx, `INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms)
  VALUES ($1, $2::uuid, $3::uuid, 1)`, int16(part.Index), f.flow.String(), down); err != nil {
			t.Fatal(err)
		}
	}

	r := claim(t, c, "f-p1")
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: p1, Fence: r.Fence()}); err != nil {
		t.Fatal(err)
	}
	r = claim(t, c, "f-p2")
	if fr, err := c.FailExecution(ctx, &postgres.FailExecutionParams{ExecutionID: p2, Fence: r.Fence(), FailureReason: "boom"}); err != nil || fr.RetryScheduled {
		t.Fatalf("fail p2: %+v %v", fr, err)
	}
	loser := claim(t, c, "f-l1") // still running when W wins
	r = claim(t, c, "f-w")
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: w, Fence: r.Fence()}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL`); n != 3 {
		t.Fatalf("%d undispatched completion events, want 3", n)
	}

	every := host.PluginConfig{Interval: 100 * time.Millisecond}
	_, sig, _ := startHost(t, c, map[string]host.PluginConfig{"pg_dependency_reconciler": every, "pg_edge_cancel_reconciler": every})

	t.Run("SatisfiedChildBecomesClaimable", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "c1 released", func() bool { return stateOf(t, c, c1).Eligibility == "eligible_now" })
		if st := stateOf(t, c, c1); st.Phase != "runnable" || st.Public != "waiting" {
			t.Fatalf("c1 %+v", st)
		}
		if r := claim(t, c, "f-c1"); r.ExecutionID != c1 {
			t.Fatalf("claimed %s, want c1", r.ExecutionID)
		}
	})
	t.Run("ImpossibleChildSkippedTransitively", func(t *testing.T) {
		skipped := state{"terminal", "not_applicable", "skipped", "attempt_terminal", 0}
		pgtest.Eventually(t, time.Minute, "c2 and g2 skipped", func() bool {
			return stateOf(t, c, c2) == skipped && stateOf(t, c, g2) == skipped
		})
		for _, id := range []model.ExecutionID{c2, g2} {
			if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'skipped'`, id.UUIDString()); n != 1 {
				t.Fatalf("%s: %d skipped completion events", id, n)
			}
		}
	})
	t.Run("AnyOfWinnerCancelsLosers", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "losers cancelled", func() bool {
			return stateOf(t, c, l1).Public == "cancelled" && stateOf(t, c, l2).Public == "cancelled"
		})
		if st := stateOf(t, c, d); st.Phase != "runnable" || st.Eligibility != "eligible_now" {
			t.Fatalf("d %+v", st)
		}
		for _, id := range []model.ExecutionID{l1, l2} {
			var phase, reason, by string
			if err := pool.QueryRow(ctx, `SELECT lifecycle_phase, cancellation_reason, cancelled_by FROM ff_exec_core WHERE execution_id = $1::uuid`,
				id.UUIDString()).Scan(&phase, &reason, &by); err != nil {
				t.Fatal(err)
			}
			if phase != "terminal" || reason != "sibling_quorum_satisfied" || by != "engine" {
				t.Fatalf("%s: %s %s %s", id, phase, reason, by)
			}
			if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'cancelled'`, id.UUIDString()); n != 1 {
				t.Fatalf("%s: %d cancelled completion events", id, n)
			}
		}
		if n := count(t, c, `SELECT count(*) FROM ff_attempt WHERE execution_id = $1::uuid AND outcome = 'cancelled' AND lease_expires_at_ms IS NULL`, l1.UUIDString()); n != 1 {
			t.Fatal("the running loser's lease was not released")
		}
		if n := count(t, c, `SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'revoked'`, l1.UUIDString()); n != 1 {
			t.Fatalf("%d revoked lease events for the running loser", n)
		}
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: l1, Fence: loser.Fence()}); !errors.Is(err, postgres.CodeExecutionNotActive) {
			t.Fatalf("the cancelled loser's worker completed it: %v", err)
		}
	})
	t.Run("PendingGroupsDrained", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "pending groups gone", func() bool {
			return count(t, c, `SELECT count(*) FROM ff_pending_cancel_groups`) == 0
		})
		if n := count(t, c, `SELECT count(*) FROM ff_edge_group WHERE cancel_siblings_pending_flag OR cardinality(cancel_siblings_pending_members) > 0`); n != 0 {
			t.Fatalf("%d groups still flagged", n)
		}
	})
	t.Run("IdempotentOnRerun", func(t *testing.T) {
		// Settled: every event dispatched (the losers' cancelled events
		// included, counted as failures on D's already-satisfied group).
		pgtest.Eventually(t, time.Minute, "all events dispatched", func() bool {
			return count(t, c, `SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL`) == 0
		})
		var s, fl, sk, run int
		if err := pool.QueryRow(ctx, `SELECT success_count, fail_count, skip_count, running_count FROM ff_edge_group WHERE downstream_eid = $1::uuid`,
			d.UUIDString()).Scan(&s, &fl, &sk, &run); err != nil {
			t.Fatal(err)
		}
		if s != 1 || fl != 2 || sk != 0 || run != 0 {
			t.Fatalf("d's counters %d/%d/%d/%d, want 1/2/0/0", s, fl, sk, run)
		}
		before := flowSnapshot(t, c)
		// Drop the records of earlier passes. Each plugin's first record
		// after that may still be a pass begun before the snapshot; the two
		// after it must do nothing.
	drain:
		for {
			select {
			case <-sig.PartitionDone.C():
			default:
				break drain
			}
		}
		seen := map[string]int{}
		deadline := time.After(time.Minute)
		for seen["pg_dependency_reconciler"] < 3 || seen["pg_edge_cancel_reconciler"] < 3 {
			select {
			case rec := <-sig.PartitionDone.C():
				if rec.Partition != int(part.Index) {
					continue
				}
				seen[rec.Plugin]++
				if seen[rec.Plugin] > 1 && (rec.Result.Acted != 0 || rec.Result.Errors != 0 || rec.Error != "") {
					t.Fatalf("%s acted on a settled database: %+v %s", rec.Plugin, rec.Result, rec.Error)
				}
			case <-deadline:
				t.Fatalf("no further passes: %v", seen)
			}
		}
		if after := flowSnapshot(t, c); after != before {
			t.Fatalf("reruns changed the database:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// A flow member is created, then added to its flow; one without parents
// can be claimed and completed in between, so its completion event names
// no flow. A child added after that counts the parent as running (its
// event is not dispatched yet): pg_dependency_reconciler must take the
// parent's flow as it is at dispatch and release the child (it skipped
// the event as standalone, and the child stayed blocked for good).
func TestDependencyReconcilerParentAddedAfterItCompleted(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 3*time.Minute)
	flow := model.NewUUID()
	if err := c.CreateFlow(ctx, &postgres.CreateFlowParams{FlowID: flow, Kind: "dag", Namespace: "ns"}); err != nil {
		t.Fatal(err)
	}
	parent := parts.NewFlowExecutionID(flow)
	if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: parent, Namespace: "ns",
		LaneID: "late-root", ExecutionKind: "test"}); err != nil {
		t.Fatal(err)
	}
	r := claim(t, c, "late-root")
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: parent, Fence: r.Fence()}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND flow_id IS NULL`, parent.UUIDString()); n != 1 {
		t.Fatalf("%d flowless completion events of the parent, want 1", n)
	}
	if _, err := c.AddFlowMember(ctx, &postgres.AddFlowMemberParams{FlowID: flow, Child: parent}); err != nil {
		t.Fatal(err)
	}
	child := parts.NewFlowExecutionID(flow)
	if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: child, Namespace: "ns",
		LaneID: "late-child", ExecutionKind: "test", DelayUntil: time.Now().Add(time.Hour).UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	st, err := c.AddFlowMember(ctx, &postgres.AddFlowMemberParams{FlowID: flow, Child: child, Parents: []model.ExecutionID{parent}})
	if err != nil || st != postgres.MemberBlocked {
		t.Fatalf("add child: %q, %v; want blocked (the parent's event is not dispatched)", st, err)
	}
	startHost(t, c, map[string]host.PluginConfig{"pg_dependency_reconciler": {Interval: 100 * time.Millisecond}})
	pgtest.Eventually(t, time.Minute, "child released", func() bool { return stateOf(t, c, child).Eligibility == "eligible_now" })
}
