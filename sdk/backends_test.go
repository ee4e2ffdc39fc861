package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// sdkBackend is one row of the backend tables: a client and workers on a
// fresh deployment of one backend.
type sdkBackend struct {
	name string
	// open returns a client and a worker constructor on a fresh
	// deployment.
	open func(t *testing.T, ctx context.Context) (*sdk.Client, func(cfg sdk.WorkerConfig) *sdk.Worker)
	// notActive is the error a call on a terminal execution matches.
	notActive error
}

// sdkBackends are Valkey (the shared server, a fresh database) and
// Postgres (the shared throwaway cluster, a fresh migrated database).
var sdkBackends = []sdkBackend{
	{name: "Valkey", notActive: valkey.CodeExecutionNotActive,
		open: func(t *testing.T, ctx context.Context) (*sdk.Client, func(sdk.WorkerConfig) *sdk.Worker) {
			vc := valkeytest.Client(t)
			c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			return c, func(cfg sdk.WorkerConfig) *sdk.Worker {
				cfg.Logger = valkeytest.Logger()
				w, err := sdk.Connect(ctx, vc, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = w.Close(context.Background()) })
				return w
			}
		}},
	{name: "Postgres", notActive: postgres.CodeExecutionNotActive,
		open: func(t *testing.T, ctx context.Context) (*sdk.Client, func(sdk.WorkerConfig) *sdk.Worker) {
			pc := pgtest.Client(t, postgres.ClientConfig{Partitions: model.PartitionConfig{Flow: 8, Budget: 2, Quota: 2}})
			c, err := sdk.NewClient(ctx, sdk.ClientConfig{Postgres: pc, Logger: pgtest.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			return c, func(cfg sdk.WorkerConfig) *sdk.Worker {
				cfg.Logger = pgtest.Logger()
				w, err := sdk.ConnectPostgres(ctx, pc, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = w.Close(context.Background()) })
				return w
			}
		}},
}

// claimOne claims the next execution of w, polling until one is there.
func claimOne(t *testing.T, ctx context.Context, w *sdk.Worker) *sdk.Lease {
	t.Helper()
	var l *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "an execution to claim", func() bool {
		var err error
		if l, err = w.ClaimNext(ctx); err != nil {
			t.Fatal(err)
		}
		return l != nil
	})
	return l
}

// TestStateResultCancel: Client.State, Result and CancelExecution answer
// the same on both backends — the state of a created, a completed and a
// cancelled execution, the result stored, ErrNotFound and ErrInvalidInput,
// a cancel of a waiting and of a leased execution (whose holder can then
// no longer complete it), and a second cancel refused as not active.
func TestStateResultCancel(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			// Setup (a first Postgres cluster: initdb and the migrations)
			// gets its own time; the test its two minutes after.
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 2*time.Minute)

			id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "sr", Kind: "send", Priority: 5,
				Policy: &sdk.Policy{RequiredCapabilities: []string{"gpu", "cuda"}}})
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.State(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st.ID != id || st.PublicState != model.PublicWaiting || st.LifecyclePhase != model.PhaseRunnable ||
				st.EligibilityState != model.EligibleNow || st.Lane != "sr" || st.Kind != "send" || st.Terminal() ||
				st.Fields["required_capabilities"] != "cuda,gpu" || st.Fields["priority"] != "5" {
				t.Fatalf("created: %+v", st)
			}
			if r, err := c.Result(ctx, id); err != nil || r != nil {
				t.Fatalf("result before completion: %q %v", r, err)
			}
			if _, err := c.State(ctx, c.Partitions().NewSoloExecutionID("sr")); !errors.Is(err, sdk.ErrNotFound) {
				t.Fatalf("state of a missing execution: %v", err)
			}
			if _, err := c.State(ctx, "garbage"); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("state of garbage: %v", err)
			}
			if err := c.CancelExecution(ctx, "garbage", "x"); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("cancel of garbage: %v", err)
			}

			w := worker(sdk.WorkerConfig{WorkerID: "sr", Lanes: []string{"sr"}, Capabilities: []string{"gpu", "cuda"}})
			l := claimOne(t, ctx, w)
			if l.ID != id {
				t.Fatalf("claimed %s, want %s", l.ID, id)
			}
			if st, err := c.State(ctx, id); err != nil || st.LifecyclePhase != model.PhaseActive ||
				st.OwnershipState != model.OwnershipLeased || st.LeaseEpoch == 0 || st.AttemptCount != 1 {
				t.Fatalf("claimed: %+v %v", st, err)
			}
			if err := l.Complete(ctx, []byte("the result")); err != nil {
				t.Fatal(err)
			}
			st, err = c.State(ctx, id)
			if err != nil || st.PublicState != model.PublicCompleted || !st.Terminal() || st.TerminalOutcome != model.OutcomeSuccess {
				t.Fatalf("completed: %+v %v", st, err)
			}
			if r, err := c.Result(ctx, id); err != nil || !bytes.Equal(r, []byte("the result")) {
				t.Fatalf("result: %q %v", r, err)
			}
			if err := c.CancelExecution(ctx, id, "too late"); !errors.Is(err, be.notActive) {
				t.Fatalf("cancel of a completed execution: %v, want %v", err, be.notActive)
			}

			// A waiting execution, cancelled, is terminal and cancelled;
			// a second cancel is refused.
			waiting, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "sr-idle"})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.CancelExecution(ctx, waiting, "not needed"); err != nil {
				t.Fatal(err)
			}
			st, err = c.State(ctx, waiting)
			if err != nil || st.PublicState != model.PublicCancelled || !st.Terminal() || st.OwnershipState != model.OwnershipUnowned {
				t.Fatalf("cancelled: %+v %v", st, err)
			}
			if err := c.CancelExecution(ctx, waiting, "again"); !errors.Is(err, be.notActive) {
				t.Fatalf("second cancel: %v, want %v", err, be.notActive)
			}

			// A leased execution, cancelled: its holder cannot complete it.
			leased, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "sr"})
			if err != nil {
				t.Fatal(err)
			}
			l = claimOne(t, ctx, w)
			if l.ID != leased {
				t.Fatalf("claimed %s, want %s", l.ID, leased)
			}
			if err := c.CancelExecution(ctx, leased, "operator"); err != nil {
				t.Fatal(err)
			}
			if err := l.Complete(ctx, []byte("late")); err == nil {
				t.Fatal("the holder of a cancelled execution's lease completed it")
			}
			st, err = c.State(ctx, leased)
			if err != nil || st.PublicState != model.PublicCancelled || !st.Terminal() {
				t.Fatalf("cancelled while leased: %+v %v", st, err)
			}
			if r, err := c.Result(ctx, leased); err != nil || r != nil {
				t.Fatalf("result of a cancelled execution: %q %v", r, err)
			}
		})
	}
}
