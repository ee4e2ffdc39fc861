package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host/hostfn"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/pgflow"
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
	// dispatch resolves the dependencies of the completions so far where
	// the worker does not (Postgres: what the host's pushed
	// pg_dependency_reconciler does, natively); nil on Valkey, whose
	// workers resolve them (WorkerConfig.ResolveDependencies).
	dispatch func(t *testing.T, ctx context.Context, c *sdk.Client)
}

// pgClients maps the Postgres rows' SDK clients to their backend client,
// vkClients the Valkey rows'.
var pgClients, vkClients sync.Map

// sqlHost runs pdk SQL requests on a host SQL session (the host's
// sql_query, natively).
type sqlHost struct {
	ctx context.Context
	s   *hostfn.SQLSession
}

func (h sqlHost) SQL(req abi.SQLRequest) (abi.SQLResponse, error) { return h.s.Do(h.ctx, req) }

// pgDispatch dispatches every undispatched completion event of c's
// database with pgflow, one transaction each, as pg_dependency_reconciler
// does.
func pgDispatch(t *testing.T, ctx context.Context, c *sdk.Client) {
	t.Helper()
	v, _ := pgClients.Load(c)
	pc := v.(*postgres.Client)
	for {
		var pk, id int64
		err := pc.Pool().QueryRow(ctx, `SELECT partition_key, event_id FROM ff_completion_event WHERE dispatched_at_ms IS NULL
 ORDER BY event_id LIMIT 1`).Scan(&pk, &id)
		if errors.Is(err, pgx.ErrNoRows) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		sess := hostfn.NewSQLSession(pc.PluginSQL(), &abi.Capabilities{SQL: pgsql.Grants(pgsql.All...)}, "")
		h := sqlHost{ctx: ctx, s: sess}
		err = pdk.Tx(h, func() error {
			_, err := pgflow.DispatchCompletion(h, pk, id, time.Now().UnixMilli())
			return err
		})
		sess.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
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
			vkClients.Store(c, vc)
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
	{name: "Postgres", notActive: postgres.CodeExecutionNotActive, dispatch: pgDispatch,
		open: func(t *testing.T, ctx context.Context) (*sdk.Client, func(sdk.WorkerConfig) *sdk.Worker) {
			pc := pgtest.Client(t, postgres.ClientConfig{Partitions: model.PartitionConfig{Flow: 8, Budget: 2, Quota: 2}})
			c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			pgClients.Store(c, pc)
			return c, func(cfg sdk.WorkerConfig) *sdk.Worker {
				cfg.Logger = pgtest.Logger()
				w, err := sdk.Connect(ctx, pc, cfg)
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

// TestFlowChildEligible: a flow built with the SDK holds a child until
// its parent completed, then the child becomes claimable, on both
// backends; a child added after its parent already completed is claimable
// at once, and an AnyOf child runs
// after the first of its parents.
func TestFlowChildEligible(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 2*time.Minute)
			dispatch := func() {
				if be.dispatch != nil {
					be.dispatch(t, ctx, c)
				}
			}
			f, err := c.CreateFlow(ctx, "pipeline")
			if err != nil {
				t.Fatal(err)
			}
			parent, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "fl"})
			if err != nil {
				t.Fatal(err)
			}
			child, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "fl"}, parent)
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.State(ctx, child); err != nil || st.EligibilityState != model.EligibleBlockedByDeps || st.FlowID != f.ID.String() {
				t.Fatalf("child before its parent ran: %+v %v", st, err)
			}
			w := worker(sdk.WorkerConfig{WorkerID: "fl", Lanes: []string{"fl"}, ResolveDependencies: true})
			l := claimOne(t, ctx, w)
			if l.ID != parent {
				t.Fatalf("claimed %s before its parent %s", l.ID, parent)
			}
			if got, err := w.ClaimNext(ctx); err != nil || got != nil {
				t.Fatalf("claimed %v while its parent runs (%v)", got, err)
			}
			if err := l.Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
			dispatch()
			if l := claimOne(t, ctx, w); l.ID != child {
				t.Fatalf("claimed %s, want the child %s", l.ID, child)
			} else if err := l.Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
			dispatch()

			// Parents that finished before the child was added.
			late, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "fl"}, parent)
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.State(ctx, late); err != nil || st.EligibilityState != model.EligibleNow {
				t.Fatalf("child of a completed parent: %+v %v", st, err)
			}
			if l := claimOne(t, ctx, w); l.ID != late {
				t.Fatalf("claimed %s, want %s", l.ID, late)
			} else if err := l.Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
			dispatch()

			// AnyOf: the first parent to succeed runs the child.
			a, _ := f.Add(ctx, sdk.ExecutionSpec{Lane: "fl-any"})
			b, _ := f.Add(ctx, sdk.ExecutionSpec{Lane: "fl-any"})
			any, err := f.AddJoin(ctx, sdk.ExecutionSpec{Lane: "fl-any-child"}, sdk.AnyOf(sdk.LetRun), a, b)
			if err != nil {
				t.Fatal(err)
			}
			wa := worker(sdk.WorkerConfig{WorkerID: "fl-any", Lanes: []string{"fl-any"}, ResolveDependencies: true})
			if err := claimOne(t, ctx, wa).Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
			dispatch()
			wc := worker(sdk.WorkerConfig{WorkerID: "fl-any-child", Lanes: []string{"fl-any-child"}, ResolveDependencies: true})
			if l := claimOne(t, ctx, wc); l.ID != any {
				t.Fatalf("claimed %s, want the any-of child %s", l.ID, any)
			}
		})
	}
}
