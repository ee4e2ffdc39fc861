package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestLeaseCancelBackends: Lease.Cancel ends the held execution cancelled
// on both backends (its lease is finished: a second call is
// ErrLeaseFinished), and a holder whose execution an operator cancelled
// first ends its lease without changing what the operator wrote.
func TestLeaseCancelBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 2*time.Minute)
			id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "lc", Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			other, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "lc", Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			w := worker(sdk.WorkerConfig{WorkerID: "lc", Lanes: []string{"lc"}})
			l, err := w.ClaimExecution(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Cancel(ctx, "no longer wanted"); err != nil {
				t.Fatal(err)
			}
			st, err := c.State(ctx, id)
			if err != nil || st.PublicState != model.PublicCancelled || !st.Terminal() ||
				st.TerminalOutcome != model.OutcomeCancelled || st.Fields["cancellation_reason"] != "no longer wanted" {
				t.Fatalf("cancelled by its holder: %+v %v", st, err)
			}
			if err := l.Cancel(ctx, "again"); !errors.Is(err, sdk.ErrLeaseFinished) {
				t.Fatalf("second cancel: %v, want ErrLeaseFinished", err)
			}
			if err := l.Complete(ctx, nil); !errors.Is(err, sdk.ErrLeaseFinished) {
				t.Fatalf("complete after cancel: %v, want ErrLeaseFinished", err)
			}

			l2, err := w.ClaimExecution(ctx, other)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.CancelExecution(ctx, other, "operator"); err != nil {
				t.Fatal(err)
			}
			// Valkey reads the cancelled execution, still showing this
			// lease's epoch and attempt, as the replay of the holder's own
			// cancel (nil); Postgres answers that the lease is gone. Either
			// way the lease is over and the operator's cancel stands.
			if err := l2.Cancel(ctx, "holder"); err != nil && !errors.Is(err, backend.ErrLeaseGone) {
				t.Fatalf("holder's cancel after the operator's: %v, want nil or backend.ErrLeaseGone", err)
			}
			if err := l2.Complete(ctx, nil); err == nil {
				t.Fatal("completed after both cancels")
			}
			if st, err := c.State(ctx, other); err != nil || st.PublicState != model.PublicCancelled ||
				st.Fields["cancellation_reason"] != "operator" {
				t.Fatalf("after both cancels: %+v %v", st, err)
			}
		})
	}
}

// TestCancelFlowBackends: Client.CancelFlow cancels every member that has
// not ended (a leased one, whose holder can then no longer complete it,
// and a child blocked on it) and leaves a completed one as it was, on
// both backends; a second cancel is refused as terminal, a missing flow
// as not found, the zero flow as invalid input.
func TestCancelFlowBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 2*time.Minute)
			f, err := c.CreateFlow(ctx, "cf")
			if err != nil {
				t.Fatal(err)
			}
			done, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "cf-done"})
			if err != nil {
				t.Fatal(err)
			}
			running, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "cf"})
			if err != nil {
				t.Fatal(err)
			}
			child, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "cf"}, running)
			if err != nil {
				t.Fatal(err)
			}
			wd := worker(sdk.WorkerConfig{WorkerID: "cf-done", Lanes: []string{"cf-done"}})
			if err := claimOne(t, ctx, wd).Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
			w := worker(sdk.WorkerConfig{WorkerID: "cf", Lanes: []string{"cf"}})
			l := claimOne(t, ctx, w)
			if l.ID != running {
				t.Fatalf("claimed %s, want %s", l.ID, running)
			}

			if err := c.CancelFlow(ctx, model.NewUUID(), "x"); !errors.Is(err, backend.ErrFlowNotFound) {
				t.Fatalf("cancel of a missing flow: %v, want backend.ErrFlowNotFound", err)
			}
			if err := c.CancelFlow(ctx, model.UUID{}, "x"); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("cancel of the zero flow: %v, want ErrInvalidInput", err)
			}
			if st, err := c.State(ctx, running); err != nil || st.LifecyclePhase != model.PhaseActive {
				t.Fatalf("refused cancels changed a member: %+v %v", st, err)
			}

			if err := c.CancelFlow(ctx, f.ID, "stop"); err != nil {
				t.Fatal(err)
			}
			for _, id := range []model.ExecutionID{running, child} {
				if st, err := c.State(ctx, id); err != nil || st.PublicState != model.PublicCancelled || !st.Terminal() {
					t.Fatalf("member %s after the flow's cancel: %+v %v", id, st, err)
				}
			}
			if st, err := c.State(ctx, done); err != nil || st.PublicState != model.PublicCompleted {
				t.Fatalf("completed member after the flow's cancel: %+v %v", st, err)
			}
			if err := l.Complete(ctx, nil); err == nil {
				t.Fatal("the holder of a cancelled member completed it")
			}
			if err := c.CancelFlow(ctx, f.ID, "again"); !errors.Is(err, backend.ErrFlowTerminal) {
				t.Fatalf("second cancel: %v, want backend.ErrFlowTerminal", err)
			}
		})
	}
}
