package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

func execSQL(t *testing.T, c *postgres.Client, sql string, args ...any) {
	t.Helper()
	if _, err := c.Pool().Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func text(t *testing.T, c *postgres.Client, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := c.Pool().QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// TestResetBudgetsDue: a due budget's usage is zeroed, its breach cleared
// (the breach counts kept) and its next reset scheduled one interval on
// (none without an interval); a budget not due is left alone, and a
// second pass finds nothing.
func TestResetBudgetsDue(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	const pk = 3
	for _, b := range []struct {
		id, policy string
		next       int64
	}{
		{"every-second", `{"reset_interval_ms":1000}`, 100},
		{"once", `{}`, 150},
		{"later", `{"reset_interval_ms":1000}`, 1_000_000},
	} {
		execSQL(t, c, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms,
  breach_count, last_breach_at_ms, last_breach_dim, next_reset_at_ms) VALUES ($1, $2, $3::jsonb, 1, 1, 3, 90, 'tokens', $4)`, pk, b.id, b.policy, b.next)
		execSQL(t, c, `INSERT INTO ff_budget_usage (partition_key, budget_id, dimensions_key, current_value, updated_at_ms)
  VALUES ($1, $2, 'tokens', 500, 1), ($1, $2, 'calls', 7, 1)`, pk, b.id)
	}
	res, err := c.ResetBudgetsDue(ctx, pk, 200, 0)
	if err != nil || res.Scanned != 2 || res.Acted != 2 || res.Errors != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	policy := func(id string) string {
		return text(t, c, `SELECT concat_ws(' ', next_reset_at_ms, last_breach_at_ms, last_breach_dim, breach_count, updated_at_ms)
  FROM ff_budget_policy WHERE partition_key = $1 AND budget_id = $2`, pk, id)
	}
	usage := func(id string) string {
		return text(t, c, `SELECT string_agg(dimensions_key || '=' || current_value || '@' || COALESCE(last_reset_at_ms, 0), ',' ORDER BY dimensions_key)
  FROM ff_budget_usage WHERE partition_key = $1 AND budget_id = $2`, pk, id)
	}
	for _, w := range []struct{ id, policy, usage string }{
		{"every-second", "1200 3 200", "calls=0@200,tokens=0@200"},
		{"once", "3 200", "calls=0@200,tokens=0@200"},
		{"later", "1000000 90 tokens 3 1", "calls=7@0,tokens=500@0"},
	} {
		if got := policy(w.id); got != w.policy {
			t.Errorf("%s policy %q, want %q", w.id, got, w.policy)
		}
		if got := usage(w.id); got != w.usage {
			t.Errorf("%s usage %q, want %q", w.id, got, w.usage)
		}
	}
	if res, err := c.ResetBudgetsDue(ctx, pk, 200, 0); err != nil || res.Scanned != 0 {
		t.Fatalf("second pass: %+v %v", res, err)
	}
	if res, err := c.ResetBudgetsDue(ctx, pk, 1200, 0); err != nil || res.Acted != 1 || policy("every-second") != "2200 3 1200" {
		t.Fatalf("next interval: %+v %v %s", res, err, policy("every-second"))
	}
}

// TestExpireExecutionDeadlines: active, suspended and runnable executions
// whose deadline passed end expired with an 'expired' completion event (an
// active one's attempt interrupted and an 'expired' lease event, a
// suspended one's suspension removed); a delayed execution (deadline_at_ms
// is its delay) and one not yet due are left alone.
func TestExpireExecutionDeadlines(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	now := time.Now().UnixMilli()
	create := func(lane string, deadline, delay int64) model.ExecutionID {
		id := parts.NewSoloExecutionID(lane)
		if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: lane,
			ExecutionKind: "test", ExecutionDeadlineAt: deadline, DelayUntil: delay}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	active := create("dl-active", now+1000, 0)
	claim(t, c, "dl-active")
	suspended := create("dl-suspended", now+1000, 0)
	execSQL(t, c, `UPDATE ff_exec_core SET lifecycle_phase = 'suspended', public_state = 'suspended' WHERE execution_id = $1::uuid`, suspended.UUIDString())
	execSQL(t, c, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, timeout_at_ms, condition)
  VALUES ($1, $2::uuid, gen_random_uuid(), $3, $4, '{}')`, int16(suspended.Partition().Index), suspended.UUIDString(), now, now+3_600_000)
	runnable := create("dl-runnable", now+1000, 0)
	delayed := create("dl-delayed", 0, now+1000)
	notDue := create("dl-later", now+3_600_000, 0)

	at := now + 2000
	total := postgres.ScanResult{}
	seen := map[uint16]bool{}
	for _, id := range []model.ExecutionID{active, suspended, runnable, delayed, notDue} {
		p := id.Partition().Index
		if seen[p] {
			continue
		}
		seen[p] = true
		res, err := c.ExpireExecutionDeadlines(ctx, p, at, 0)
		if err != nil {
			t.Fatal(err)
		}
		total.Scanned, total.Acted, total.Errors = total.Scanned+res.Scanned, total.Acted+res.Acted, total.Errors+res.Errors
	}
	if total.Scanned != 3 || total.Acted != 3 || total.Errors != 0 {
		t.Fatalf("%+v", total)
	}
	for _, id := range []model.ExecutionID{active, suspended, runnable} {
		if got := core(t, c, id); got.Phase != "terminal" || got.Public != "expired" || got.Eligibility != "not_applicable" {
			t.Errorf("%s: %+v", id, got)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'expired'`, id.UUIDString()); n != 1 {
			t.Errorf("%s: %d expired completion events", id, n)
		}
		if r := text(t, c, `SELECT raw_fields->>'failure_reason' FROM ff_exec_core WHERE execution_id = $1::uuid`, id.UUIDString()); r != "execution_deadline" {
			t.Errorf("%s: failure_reason %q", id, r)
		}
	}
	if n := count(t, c, `SELECT count(*) FROM ff_attempt WHERE execution_id = $1::uuid AND outcome = 'interrupted'
  AND lease_expires_at_ms IS NULL AND terminal_at_ms = $2`, active.UUIDString(), at); n != 1 {
		t.Error("the active execution's attempt was not interrupted")
	}
	if got := leaseEvents(t, c, active); got != "acquired:ns,expired:ns" {
		t.Errorf("lease events %s", got)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_suspension_current WHERE execution_id = $1::uuid`, suspended.UUIDString()); n != 0 {
		t.Error("the suspension of an expired execution was kept")
	}
	if got := core(t, c, delayed); got.Phase != "runnable" || got.Eligibility != "not_eligible_until_time" {
		t.Errorf("delayed: %+v", got)
	}
	if got := core(t, c, notDue); got.Phase != "runnable" || got.Eligibility != "eligible_now" {
		t.Errorf("not due: %+v", got)
	}
}

// TestExpirePendingWaitpoints: an expired pending waitpoint is deleted and
// recorded as never committed in its execution's suspension member_map
// (keyed by its key, or its id without one); an active waitpoint, one not
// expired, and one of an execution without a suspension are handled as
// such.
func TestExpirePendingWaitpoints(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	id := newExec(t, c, &execOpts{lane: "wp"})
	pk := int16(id.Partition().Index)
	execSQL(t, c, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, condition, member_map)
  VALUES ($1, $2::uuid, gen_random_uuid(), 1, '{}', '{"kept":{"status":"satisfied"}}')`, pk, id.UUIDString())
	wp := func(key, state string, expires int64) string {
		wid := model.NewUUID().String()
		execSQL(t, c, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
  expires_at_ms, waitpoint_key, state) VALUES ($1, $2::uuid, $3::uuid, 'k1', 't', 1, $4, $5, $6)`, pk, wid, id.UUIDString(), expires, key, state)
		return wid
	}
	keyed := wp("approval", "pending", 100)
	unkeyed := wp("", "pending", 150)
	active := wp("committed", "active", 100)
	later := wp("later", "pending", 10_000)
	res, err := c.ExpirePendingWaitpoints(ctx, uint16(pk), 500, 0)
	if err != nil || res.Scanned != 2 || res.Acted != 2 || res.Errors != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_waitpoint_pending WHERE execution_id = $1::uuid`, id.UUIDString()); n != 2 {
		t.Errorf("%d waitpoints left, want 2", n)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_waitpoint_pending WHERE waitpoint_id IN ($1::uuid, $2::uuid)`, active, later); n != 2 {
		t.Errorf("the active or the unexpired waitpoint went (%d of 2 left); expired keyed %s", n, keyed)
	}
	mm := text(t, c, `SELECT member_map::text FROM ff_suspension_current WHERE execution_id = $1::uuid`, id.UUIDString())
	want := `{"kept": {"status": "satisfied"}, "approval": {"source": "pending_wp_expiry", "status": "never_committed", "closed_at_ms": 500}, "` +
		unkeyed + `": {"source": "pending_wp_expiry", "status": "never_committed", "closed_at_ms": 500}}`
	if mm != want {
		t.Errorf("member_map\n%s\nwant\n%s", mm, want)
	}
	// No suspension: the waitpoint still goes.
	other := newExec(t, c, &execOpts{lane: "wp"})
	wid := model.NewUUID().String()
	execSQL(t, c, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
  expires_at_ms, state) VALUES ($1, $2::uuid, $3::uuid, 'k1', 't', 1, 100, 'pending')`, pk, wid, other.UUIDString())
	if res, err := c.ExpirePendingWaitpoints(ctx, uint16(pk), 500, 0); err != nil || res.Acted != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}

// TestProjectFlowSummaries: a flow's summary counts its members by state
// and derives the flow state (running, then failed once every member
// ended with one failed); a flow without members gets no summary, and a
// projected flow is projected again on a later pass.
func TestProjectFlowSummaries(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	flow, empty := model.NewUUID(), model.NewUUID()
	p := parts.NewFlowExecutionID(flow).Partition().Index
	for _, f := range []model.UUID{flow, empty} {
		execSQL(t, c, `INSERT INTO ff_flow_core (partition_key, flow_id, public_flow_state, created_at_ms) VALUES ($1, $2::uuid, 'open', 1)`,
			int16(parts.NewFlowExecutionID(f).Partition().Index), f.String())
	}
	var members []model.ExecutionID
	for range 4 {
		members = append(members, newExec(t, c, &execOpts{lane: "fs", flow: flow}))
	}
	set := func(id model.ExecutionID, state string) {
		execSQL(t, c, `UPDATE ff_exec_core SET public_state = $2 WHERE execution_id = $1::uuid`, id.UUIDString(), state)
	}
	set(members[0], "completed")
	set(members[1], "running")
	set(members[2], "waiting_children")
	summary := func() string {
		return text(t, c, `SELECT concat_ws(' ', total_members, sampled_members, members_completed, members_failed, members_active,
  members_waiting, members_waiting_children, public_flow_state, last_summary_update_at) FROM ff_flow_summary WHERE flow_id = $1::uuid`, flow.String())
	}
	res, err := c.ProjectFlowSummaries(ctx, p, 1000, 0)
	if err != nil || res.Acted != 1 || res.Errors != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := summary(); got != "4 4 1 0 1 1 1 running 1000" {
		t.Fatalf("summary %q", got)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_flow_summary WHERE flow_id = $1::uuid`, empty.String()); n != 0 {
		t.Fatal("a flow without members got a summary")
	}
	if got := text(t, c, `SELECT public_flow_state FROM ff_flow_core WHERE flow_id = $1::uuid`, flow.String()); got != "open" {
		t.Fatalf("ff_flow_core.public_flow_state written: %s", got)
	}
	set(members[1], "failed")
	set(members[2], "skipped")
	set(members[3], "completed")
	if res, err := c.ProjectFlowSummaries(ctx, p, 1000, 0); err != nil || res.Scanned != 0 {
		t.Fatalf("same instant: %+v %v", res, err)
	}
	if res, err := c.ProjectFlowSummaries(ctx, p, 2000, 0); err != nil || res.Acted != 1 {
		t.Fatalf("later: %+v %v", res, err)
	}
	if got := summary(); got != "4 4 2 1 0 0 0 failed 2000" {
		t.Fatalf("summary %q", got)
	}
}

// TestAddFlowMember: a child's edge group counts a parent that already
// finished only once its completion event was dispatched (else the
// dispatcher counts it); a child whose finished parent failed is skipped
// with its own 'skipped' completion event; the flow's counts move.
func TestAddFlowMember(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	flow := model.NewUUID()
	if err := c.CreateFlow(ctx, &postgres.CreateFlowParams{FlowID: flow, Kind: "k", Namespace: "ns", NowMs: 1}); err != nil {
		t.Fatal(err)
	}
	member := func(parents ...model.ExecutionID) (model.ExecutionID, postgres.FlowMemberState) {
		t.Helper()
		id := newExec(t, c, &execOpts{lane: "afm", flow: flow, delayUntil: time.Now().Add(time.Hour).UnixMilli()})
		st, err := c.AddFlowMember(ctx, &postgres.AddFlowMemberParams{FlowID: flow, Child: id, Parents: parents, NowMs: 10})
		if err != nil {
			t.Fatal(err)
		}
		return id, st
	}
	group := func(down model.ExecutionID) string {
		return text(t, c, `SELECT concat_ws(' ', success_count, fail_count, skip_count, running_count) FROM ff_edge_group
  WHERE downstream_eid = $1::uuid`, down.UUIDString())
	}
	p, st := member()
	if st != postgres.MemberRoot {
		t.Fatalf("root: %s", st)
	}
	execSQL(t, c, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'failed' WHERE execution_id = $1::uuid`, p.UUIDString())
	execSQL(t, c, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, occurred_at_ms)
  VALUES ($1, $2::uuid, $3::uuid, 'failed', 5)`, int16(p.Partition().Index), p.UUIDString(), flow.String())
	waiting, st := member(p)
	if st != postgres.MemberBlocked || group(waiting) != "0 0 0 1" {
		t.Fatalf("undispatched parent: %s %s", st, group(waiting))
	}
	if got := core(t, c, waiting); got.Eligibility != "blocked_by_dependencies" || got.Public != "waiting_children" {
		t.Fatalf("waiting child: %+v", got)
	}
	execSQL(t, c, `UPDATE ff_completion_event SET dispatched_at_ms = 6 WHERE execution_id = $1::uuid`, p.UUIDString())
	skipped, st := member(p)
	if st != postgres.MemberSkipped || group(skipped) != "0 1 0 0" || core(t, c, skipped).Public != "skipped" {
		t.Fatalf("failed parent: %s %s %+v", st, group(skipped), core(t, c, skipped))
	}
	if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'skipped'`, skipped.UUIDString()); n != 1 {
		t.Fatalf("%d skipped events", n)
	}
	if got := text(t, c, `SELECT concat_ws(' ', graph_revision, raw_fields->>'node_count', raw_fields->>'edge_count') FROM ff_flow_core
  WHERE flow_id = $1::uuid`, flow.String()); got != "3 3 2" {
		t.Fatalf("flow counts %q", got)
	}
}
