package pgsuite_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
)

// TestDependencyClaimFlowless: the per-event scan lists flow members'
// events only, and the bulk claim takes the partition's
// completion events of executions in no flow, at most limit a statement,
// none committed after the bound, none another transaction holds, and
// never the event of an execution added to a flow after it completed
// (that one's edges still need the per-event dispatch).
func TestDependencyClaimFlowless(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	flow := model.NewUUID()
	if err := c.CreateFlow(ctx, &postgres.CreateFlowParams{FlowID: flow, Kind: "dag", Namespace: "ns"}); err != nil {
		t.Fatal(err)
	}
	// Executions on the flow's partition; all but the last stay out of it.
	done := func(lane string) model.ExecutionID {
		t.Helper()
		id := parts.NewFlowExecutionID(flow)
		if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, Namespace: "ns",
			LaneID: lane, ExecutionKind: "test"}); err != nil {
			t.Fatal(err)
		}
		r := claim(t, c, lane)
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence()}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var solo []model.ExecutionID
	for range 5 {
		solo = append(solo, done("flowless-solo"))
	}
	member := done("flowless-member")
	if _, err := c.AddFlowMember(ctx, &postgres.AddFlowMemberParams{FlowID: flow, Child: member}); err != nil {
		t.Fatal(err)
	}
	pk := int64(member.Partition().Index)
	undispatched := func(id model.ExecutionID) bool {
		return count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND dispatched_at_ms IS NULL`, id.UUIDString()) == 1
	}

	// Another dispatcher holds the first standalone event.
	tx, err := c.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ff_completion_event WHERE partition_key = $1 AND execution_id = $2::uuid FOR UPDATE`,
		pk, solo[0].UUIDString()); err != nil {
		t.Fatal(err)
	}

	s := hostfn.NewSQLSession(c.PluginSQL(), &abi.Capabilities{SQL: pgsql.Grants(pgsql.DependencyClaimFlowless, pgsql.DependencyScanMembers)}, "")
	// The per-event scan lists the member's event only.
	rs, err := s.Do(ctx, abi.SQLRequest{Statements: []abi.SQLStatement{pdk.Q(pgsql.DependencyScanMembers, pk, time.Now().Add(time.Hour).UnixMilli(), 100)}})
	if err != nil {
		t.Fatal(err)
	}
	memberEvent := count(t, c, `SELECT event_id FROM ff_completion_event WHERE execution_id = $1::uuid`, member.UUIDString())
	if rows := rs.Results[0].Rows; len(rows) != 1 || rows[0][0].AsInt() != int64(memberEvent) {
		t.Fatalf("scan_members listed %v, want the member's event %d alone", rows, memberEvent)
	}
	claimFlowless := func(before, limit int64) int64 {
		t.Helper()
		rs, err := s.Do(ctx, abi.SQLRequest{Statements: []abi.SQLStatement{
			pdk.Q(pgsql.DependencyClaimFlowless, pk, before, time.Now().UnixMilli(), limit)}})
		if err != nil {
			t.Fatal(err)
		}
		return rs.Results[0].RowsAffected
	}
	if n := claimFlowless(1, 10); n != 0 {
		t.Fatalf("claimed %d events committed after the bound", n)
	}
	now := time.Now().Add(time.Hour).UnixMilli()
	if a, b, z := claimFlowless(now, 3), claimFlowless(now, 3), claimFlowless(now, 3); a != 3 || b != 1 || z != 0 {
		t.Fatalf("claims of limit 3: %d, %d, %d; want 3, 1, 0 (four free standalone events)", a, b, z)
	}
	if !undispatched(solo[0]) {
		t.Fatal("claimed the event another transaction holds")
	}
	if !undispatched(member) {
		t.Fatal("claimed the event of an execution now in a flow")
	}
	for _, id := range solo[1:] {
		if undispatched(id) {
			t.Fatalf("standalone %s left unclaimed", id)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := claimFlowless(now, 10); n != 1 || undispatched(solo[0]) {
		t.Fatalf("after the holder let go: claimed %d", n)
	}
	if !undispatched(member) {
		t.Fatal("claimed the flow member's event")
	}
}

// TestDependencyReconcilerClaimsStandaloneEvents: the plugin dispatches a
// flow member's event and claims every standalone one of the partition
// (whose per-event scan no longer lists them) in the same pass, counting
// each as acted.
func TestDependencyReconcilerClaimsStandaloneEvents(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 3*time.Minute)
	f := &flowFixture{t: t, c: c, flow: model.NewUUID()}
	parent := f.member("standalone-parent", false)
	child := f.member("standalone-parent", true)
	f.group(child, `{"kind":"all_of"}`, parent)
	const standalone = 40
	for range standalone {
		id := parts.NewFlowExecutionID(f.flow) // the flow's partition, outside the flow
		if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, Namespace: "ns",
			LaneID: "standalone", ExecutionKind: "test"}); err != nil {
			t.Fatal(err)
		}
		r := claim(t, c, "standalone")
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence()}); err != nil {
			t.Fatal(err)
		}
	}
	r := claim(t, c, "standalone-parent")
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: parent, Fence: r.Fence()}); err != nil {
		t.Fatal(err)
	}
	part := int(parent.Partition().Index)
	_, sig, _ := startHost(t, c, map[string]host.PluginConfig{"pg_dependency_reconciler": {Interval: 100 * time.Millisecond,
		Config: map[string]string{"stale_ms": "0"}}})
	for {
		rec := wait(t, sig.PartitionDone.C(), time.Minute, "a pass over the flow's partition")
		if rec.Partition != part {
			continue
		}
		if rec.Result.Errors != 0 || rec.Error != "" {
			t.Fatalf("pass: %+v %s", rec.Result, rec.Error)
		}
		if rec.Result.Acted == 0 {
			continue // a pass before the events were visible to it
		}
		if rec.Result.Acted != standalone+1 {
			t.Fatalf("one pass acted on %d events, want all %d", rec.Result.Acted, standalone+1)
		}
		break
	}
	if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL`); n != 0 {
		t.Fatalf("%d events left undispatched", n)
	}
	if st := stateOf(t, c, child); st.Eligibility != model.EligibleNow {
		t.Fatalf("child %+v", st)
	}
}
