package pgsuite_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// TestMaintenancePlugins runs the four reconcilers upstream does not drive
// on Postgres together on one database, each against work of its own:
// pg_budget_reset (on the budget partitions), pg_execution_deadline,
// pg_pending_wp_expiry and pg_flow_projector.
func TestMaintenancePlugins(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	now := time.Now().UnixMilli()
	due := now + 10*60_000 // due within the plugins' hour ahead
	sqlExec := func(sql string, args ...any) {
		t.Helper()
		if _, err := c.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	text := func(sql string, args ...any) string {
		t.Helper()
		var s string
		if err := c.Pool().QueryRow(ctx, sql, args...).Scan(&s); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return s
	}

	// Budget: due, one interval of an hour; its usage is spent.
	sqlExec(`INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms, next_reset_at_ms,
  last_breach_at_ms, last_breach_dim) VALUES (0, 'b1', '{"reset_interval_ms":3600000}', 1, 1, $1, 5, 'tokens')`, due)
	sqlExec(`INSERT INTO ff_budget_usage (partition_key, budget_id, dimensions_key, current_value, updated_at_ms) VALUES (0, 'b1', 'tokens', 99, 1)`)
	// Deadline: a runnable execution past its deadline, one not yet.
	withDeadline := func(lane string, deadline int64) model.ExecutionID {
		id := parts.NewSoloExecutionID(lane)
		if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, Namespace: "ns", LaneID: lane,
			ExecutionKind: "test", ExecutionDeadlineAt: deadline}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	overdue := withDeadline("dl", due)
	later := withDeadline("dl2", now+2*3600_000)
	// Waitpoint: a suspended execution's pending waitpoint that expires.
	waiting := create(t, c, "wp", "", 0)
	wpk := int16(waiting.Partition().Index)
	sqlExec(`INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, condition)
  VALUES ($1, $2::uuid, gen_random_uuid(), 1, '{}')`, wpk, waiting.UUIDString())
	sqlExec(`INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
  expires_at_ms, waitpoint_key, state) VALUES ($1, gen_random_uuid(), $2::uuid, 'k1', 't', 1, $3, 'approval', 'pending')`, wpk, waiting.UUIDString(), due)
	// Flow: two members, one completed.
	flow := model.NewUUID()
	sqlExec(`INSERT INTO ff_flow_core (partition_key, flow_id, public_flow_state, created_at_ms) VALUES ($1, $2::uuid, 'open', 1)`,
		int16(parts.NewFlowExecutionID(flow).Partition().Index), flow.String())
	f := &flowFixture{t: t, c: c, flow: flow}
	done := f.member("fl", false)
	f.member("fl", false)
	sqlExec(`UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'completed' WHERE execution_id = $1::uuid`, done.UUIDString())

	every := host.PluginConfig{Interval: 100 * time.Millisecond}
	h, _, _ := startHost(t, c, map[string]host.PluginConfig{
		"pg_budget_reset": every, "pg_execution_deadline": every, "pg_pending_wp_expiry": every, "pg_flow_projector": every,
	})
	<-h.Started()
	for _, name := range []string{"pg_budget_reset", "pg_execution_deadline", "pg_pending_wp_expiry", "pg_flow_projector"} {
		if st, ok := h.Plugin(name); !ok || st.State != host.StateRunning {
			t.Fatalf("%s: %+v", name, st)
		}
	}

	t.Run("BudgetReset", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "budget reset", func() bool {
			return count(t, c, `SELECT count(*) FROM ff_budget_usage WHERE budget_id = 'b1' AND current_value = 0`) == 1
		})
		if n := count(t, c, `SELECT count(*) FROM ff_budget_policy WHERE budget_id = 'b1' AND last_breach_at_ms IS NULL
  AND next_reset_at_ms > $1`, due); n != 1 {
			t.Fatal("policy not rescheduled past the reset or breach kept")
		}
	})
	t.Run("ExecutionDeadline", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "deadline expiry", func() bool { return stateOf(t, c, overdue).Phase == "terminal" })
		if st := stateOf(t, c, overdue); st.Public != "expired" {
			t.Fatalf("%+v", st)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'expired'`, overdue.UUIDString()); n != 1 {
			t.Fatalf("%d expired completion events", n)
		}
		if st := stateOf(t, c, later); st.Phase != "runnable" {
			t.Fatalf("not yet due: %+v", st)
		}
	})
	t.Run("PendingWaitpointExpiry", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "waitpoint expiry", func() bool {
			return count(t, c, `SELECT count(*) FROM ff_waitpoint_pending WHERE execution_id = $1::uuid`, waiting.UUIDString()) == 0
		})
		if got := text(`SELECT member_map->'approval'->>'status' FROM ff_suspension_current WHERE execution_id = $1::uuid`, waiting.UUIDString()); got != "never_committed" {
			t.Fatalf("member status %q", got)
		}
	})
	t.Run("FlowProjector", func(t *testing.T) {
		pgtest.Eventually(t, time.Minute, "flow summary", func() bool {
			return count(t, c, `SELECT count(*) FROM ff_flow_summary WHERE flow_id = $1::uuid`, flow.String()) == 1
		})
		if got := text(`SELECT concat_ws(' ', total_members, members_completed, members_waiting, public_flow_state) FROM ff_flow_summary
  WHERE flow_id = $1::uuid`, flow.String()); got != "2 1 1 open" {
			t.Fatalf("summary %q", got)
		}
	})
}
