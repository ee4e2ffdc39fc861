package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

// TestCancelExecution: a cancel ends a flow member the way every terminal
// path does — terminal, cancelled, one 'cancelled' completion event its
// flow's dispatcher reads, the current attempt ended and its lease
// revoked — and refuses a terminal or missing execution.
func TestCancelExecution(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	flow := model.NewUUID()
	id := newExec(t, c, &execOpts{flow: flow})
	cr := claim(t, c, "")
	if cr.ExecutionID != id {
		t.Fatalf("claimed %s, want %s", cr.ExecutionID, id)
	}
	if from, err := c.CancelExecution(ctx, &postgres.CancelExecutionParams{ExecutionID: id, Reason: "why", Source: "operator_override"}); err != nil || from != model.PhaseActive {
		t.Fatalf("cancel of a leased execution: from %q, %v; want from %q", from, err, model.PhaseActive)
	}
	f, err := c.ExecutionFields(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if f["lifecycle_phase"] != model.PhaseTerminal || f["public_state"] != model.PublicCancelled ||
		f["ownership_state"] != model.OwnershipUnowned || f["cancellation_reason"] != "why" ||
		f["cancelled_by"] != "operator_override" || f["terminal_outcome"] != model.OutcomeCancelled ||
		f["flow_id"] != flow.String() || f["completed_at"] == "" {
		t.Fatalf("fields after cancel: %v", f)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'cancelled' AND flow_id = $2::uuid`,
		id.UUIDString(), flow.String()); n != 1 {
		t.Fatalf("cancelled completion events: %d, want 1", n)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_attempt WHERE execution_id = $1::uuid AND outcome = 'cancelled' AND lease_expires_at_ms IS NULL`,
		id.UUIDString()); n != 1 {
		t.Fatalf("cancelled attempts: %d, want 1", n)
	}
	if ev := leaseEvents(t, c, id); !strings.HasSuffix(ev, ",revoked:ns") {
		t.Fatalf("lease events %q: want the last one revoked", ev)
	}
	if _, err := c.CancelExecution(ctx, &postgres.CancelExecutionParams{ExecutionID: id}); !errors.Is(err, postgres.CodeExecutionNotActive) {
		t.Fatalf("second cancel: %v", err)
	}
	missing := parts.NewSoloExecutionID("lane-a")
	if _, err := c.CancelExecution(ctx, &postgres.CancelExecutionParams{ExecutionID: missing}); !errors.Is(err, postgres.CodeExecutionNotFound) {
		t.Fatalf("cancel of a missing execution: %v", err)
	}
	if _, err := c.ExecutionFields(ctx, missing); !errors.Is(err, postgres.CodeExecutionNotFound) {
		t.Fatalf("fields of a missing execution: %v", err)
	}
	if r, err := c.ExecutionResult(context.Background(), id); err != nil || r != nil {
		t.Fatalf("result of a cancelled execution: %q %v", r, err)
	}
}
