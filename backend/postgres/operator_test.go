package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

// operatorEvents lists an execution's ff_operator_event rows as
// "type:details" in order.
func operatorEvents(t *testing.T, c *postgres.Client, id model.ExecutionID) []string {
	t.Helper()
	rows, err := c.Pool().Query(pgtest.Context(t, 10*time.Second), `SELECT event_type || ':' || details::text || ':' || COALESCE(namespace, '-')
  FROM ff_operator_event WHERE execution_id = $1 ORDER BY event_id`, id.UUIDString())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestChangePriority: an eligible execution's priority changes (clamped
// as ff_change_priority clamps it), the claim order follows it, and the
// change is one priority_changed operator event; a leased or missing
// execution is refused and nothing is written.
func TestChangePriority(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	older := newExec(t, c, &execOpts{lane: "prio"})
	newer := newExec(t, c, &execOpts{lane: "prio"})
	r, err := c.ChangePriority(ctx, newer, 12_000)
	if err != nil || r.Old != 0 || r.New != model.PriorityMax {
		t.Fatalf("change priority: %+v %v, want 0 -> %d", r, err, model.PriorityMax)
	}
	if ev := operatorEvents(t, c, newer); len(ev) != 1 || ev[0] != `priority_changed:{"new_priority": 9000, "old_priority": 0}:ns` {
		t.Fatalf("operator events %q", ev)
	}
	if got := claim(t, c, "prio"); got.ExecutionID != newer {
		t.Fatalf("claimed %s first, want the reprioritised %s (older %s)", got.ExecutionID, newer, older)
	}
	if _, err := c.ChangePriority(ctx, newer, 5); !errors.Is(err, postgres.CodeExecutionNotEligible) {
		t.Fatalf("priority of a leased execution: %v", err)
	}
	if _, err := c.ChangePriority(ctx, parts.NewSoloExecutionID("prio"), 5); !errors.Is(err, postgres.CodeExecutionNotFound) {
		t.Fatalf("priority of a missing execution: %v", err)
	}
	if _, err := c.ChangePriority(ctx, "garbage", 5); !errors.Is(err, postgres.CodeInvalidInput) {
		t.Fatalf("priority of a malformed id: %v", err)
	}
	if ev := operatorEvents(t, c, newer); len(ev) != 1 {
		t.Fatalf("a refused change wrote operator events: %q", ev)
	}
	f, err := c.ExecutionFields(ctx, newer)
	if err != nil || f["priority"] != "9000" {
		t.Fatalf("fields after the refusals: %v %v", f["priority"], err)
	}
}

// TestReplayExecution: a completed execution replays to waiting (its
// attempt reset, replay_count 1, one replayed operator event), is claimed
// and completes again with a second completion event; a replay of one
// not ended, missing, a skipped flow member or a member with a downstream
// is refused and writes nothing; a flow's leaf replays.
func TestReplayExecution(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	id := newExec(t, c, &execOpts{lane: "replay"})
	if _, err := c.ReplayExecution(ctx, id); !errors.Is(err, postgres.CodeExecutionNotTerminal) {
		t.Fatalf("replay of a waiting execution: %v", err)
	}
	r := claim(t, c, "replay")
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence(), Result: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	rr, err := c.ReplayExecution(ctx, id)
	if err != nil || rr.ReplayCount != 1 || rr.PublicState != model.PublicWaiting {
		t.Fatalf("replay: %+v %v", rr, err)
	}
	got := core(t, c, id)
	if got.Phase != model.PhaseRunnable || got.Eligibility != model.EligibleNow || got.Public != model.PublicWaiting ||
		got.Attempt != "pending_replay_attempt" || got.Ownership != model.OwnershipUnowned {
		t.Fatalf("exec_core after replay: %+v", got)
	}
	f, err := c.ExecutionFields(ctx, id)
	if err != nil || f["replay_count"] != "1" || f["terminal_outcome"] != "none" || f["completed_at"] != "" {
		t.Fatalf("fields after replay: %v %v", f, err)
	}
	if res, err := c.ExecutionResult(ctx, id); err != nil || res != nil {
		t.Fatalf("result after replay: %q %v, want none", res, err)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_attempt WHERE execution_id = $1::uuid AND outcome IS NULL AND terminal_at_ms IS NULL
 AND worker_instance_id IS NULL`, id.UUIDString()); n != 1 {
		t.Fatalf("attempts reset by the replay: %d, want 1", n)
	}
	if ev := operatorEvents(t, c, id); len(ev) != 1 || ev[0] != `replayed:{"branch": "normal"}:ns` {
		t.Fatalf("operator events %q", ev)
	}
	r2 := claim(t, c, "replay")
	if r2.ExecutionID != id || r2.LeaseEpoch <= r.LeaseEpoch {
		t.Fatalf("claim after replay: %+v (first epoch %d)", r2, r.LeaseEpoch)
	}
	if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r2.Fence(), Result: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.ExecutionResult(ctx, id); err != nil || string(res) != "second" {
		t.Fatalf("result after the replayed run: %q %v", res, err)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'success'`, id.UUIDString()); n != 2 {
		t.Fatalf("completion events: %d, want 2", n)
	}
	if rr, err := c.ReplayExecution(ctx, id); err != nil || rr.ReplayCount != 2 {
		t.Fatalf("second replay: %+v %v", rr, err)
	}

	if _, err := c.ReplayExecution(ctx, parts.NewSoloExecutionID("replay")); !errors.Is(err, postgres.CodeExecutionNotFound) {
		t.Fatalf("replay of a missing execution: %v", err)
	}
	// A skipped flow member is refused: its state stays as it was.
	flow := model.NewUUID()
	member := newExec(t, c, &execOpts{lane: "replay-flow", flow: flow})
	execSQL(t, c, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'skipped', eligibility_state = 'not_applicable'
 WHERE partition_key = $1 AND execution_id = $2::uuid`, int16(member.Partition().Index), member.UUIDString())
	if _, err := c.ReplayExecution(ctx, member); !errors.Is(err, postgres.CodeInvalidInput) {
		t.Fatalf("replay of a skipped flow member: %v", err)
	}
	if got := core(t, c, member); got.Phase != model.PhaseTerminal || got.Public != model.PublicSkipped {
		t.Fatalf("skipped member after a refused replay: %+v", got)
	}
	if ev := operatorEvents(t, c, member); len(ev) != 0 {
		t.Fatalf("a refused replay wrote operator events: %q", ev)
	}
	// root -> leaf, both ended: the root's replay is refused (its next
	// completion would count again in the leaf's edge group), the leaf's
	// runs.
	root := newExec(t, c, &execOpts{lane: "replay-flow", flow: flow})
	leaf := newExec(t, c, &execOpts{lane: "replay-flow", flow: flow})
	pk := int16(root.Partition().Index)
	execSQL(t, c, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy)
VALUES ($1, $2::uuid, $3::uuid, $4::uuid, $5::uuid, '{"dependency_kind":"success_only"}')`,
		pk, flow.String(), model.NewUUID().String(), root.UUIDString(), leaf.UUIDString())
	execSQL(t, c, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'completed', eligibility_state = 'not_applicable'
 WHERE partition_key = $1 AND execution_id IN ($2::uuid, $3::uuid)`, pk, root.UUIDString(), leaf.UUIDString())
	if _, err := c.ReplayExecution(ctx, root); !errors.Is(err, postgres.CodeInvalidInput) || !strings.Contains(err.Error(), "downstream") {
		t.Fatalf("replay of a flow member with a downstream: %v", err)
	}
	if got := core(t, c, root); got.Phase != model.PhaseTerminal {
		t.Fatalf("root after a refused replay: %+v", got)
	}
	if rr, err := c.ReplayExecution(ctx, leaf); err != nil || rr.ReplayCount != 1 {
		t.Fatalf("replay of a flow's leaf: %+v %v", rr, err)
	}
}
