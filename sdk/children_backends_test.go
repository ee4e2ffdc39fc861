package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestWaitForChildrenBackends: on both backends a flow member fans out
// two children at run time and waits for them; it runs again (the same
// attempt, "resumed") only after both completed, then completes. A
// member whose child fails ends skipped, and a job outside a flow cannot
// wait for children.
func TestWaitForChildrenBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 3*time.Minute)
			state := func(id model.ExecutionID) *sdk.ExecutionState {
				t.Helper()
				st, err := c.State(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			f, err := c.CreateFlow(ctx, "fanout")
			if err != nil {
				t.Fatal(err)
			}
			parent, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "fan", Kind: "parent"})
			if err != nil {
				t.Fatal(err)
			}
			doomed, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "fan", Kind: "doomed"})
			if err != nil {
				t.Fatal(err)
			}
			solo, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "fan", Kind: "solo"})
			if err != nil {
				t.Fatal(err)
			}

			var mu sync.Mutex
			var events []string
			var children []model.ExecutionID
			note := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
			soloErr := make(chan error, 1)
			mux := sdk.NewMux()
			mux.Handle("parent", func(ctx context.Context, job *sdk.Job) error {
				if job.AttemptType != "initial" {
					mu.Lock()
					kids := slices.Clone(children)
					mu.Unlock()
					for _, ch := range kids {
						if st := state(ch); st.PublicState != model.PublicCompleted {
							t.Errorf("parent resumed while child %s is %s", ch, st.PublicState)
						}
					}
					note(fmt.Sprintf("parent again (%s, attempt %d)", job.AttemptType, job.Attempt))
					return nil
				}
				// Noted first: a child may run as soon as it is added.
				note("parent fans out")
				fl := c.Flow(job.FlowID())
				var kids []model.ExecutionID
				for range 2 {
					ch, err := fl.Add(ctx, sdk.ExecutionSpec{Lane: "fan", Kind: "child"})
					if err != nil {
						return err
					}
					kids = append(kids, ch)
				}
				mu.Lock()
				children = kids
				mu.Unlock()
				return job.WaitForChildren(ctx, kids...)
			})
			mux.Handle("child", func(ctx context.Context, job *sdk.Job) error {
				note("child")
				return nil
			})
			mux.Handle("doomed", func(ctx context.Context, job *sdk.Job) error {
				ch, err := c.Flow(job.FlowID()).Add(ctx, sdk.ExecutionSpec{Lane: "fan", Kind: "failing"})
				if err != nil {
					return err
				}
				return job.WaitForChildren(ctx, ch)
			})
			mux.Handle("failing", func(ctx context.Context, job *sdk.Job) error { return errors.New("no luck") })
			mux.Handle("solo", func(ctx context.Context, job *sdk.Job) error {
				soloErr <- job.WaitForChildren(ctx, solo)
				return nil
			})
			w := worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"fan"}, Concurrency: 3, ResolveDependencies: true})
			stop := runWorker(t, ctx, w, mux.ServeJob)
			valkeytest.Eventually(t, 2*time.Minute, "parent completed and the doomed one skipped", func() bool {
				if be.dispatch != nil {
					be.dispatch(t, ctx, c)
				}
				return state(parent).PublicState == model.PublicCompleted && state(doomed).PublicState == model.PublicSkipped
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if err := <-soloErr; !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("solo job waiting for children: %v", err)
			}
			if st := state(solo); st.PublicState != model.PublicCompleted {
				t.Fatalf("solo job after a refused wait: %s", st.PublicState)
			}
			mu.Lock()
			defer mu.Unlock()
			want := []string{"parent fans out", "child", "child", "parent again (resumed, attempt 0)"}
			if !slices.Equal(events, want) {
				t.Fatalf("events = %q, want %q", events, want)
			}
		})
	}
}

// TestWaitForChildrenAlreadyDoneBackends: on both backends a child that
// completed (and, on Postgres, whose completion was dispatched) before
// the parent waits does not strand it: the parent is claimed again at
// once.
func TestWaitForChildrenAlreadyDoneBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 2*time.Minute)
			f, err := c.CreateFlow(ctx, "late-wait")
			if err != nil {
				t.Fatal(err)
			}
			parent, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "late", Kind: "parent"})
			if err != nil {
				t.Fatal(err)
			}
			again := make(chan string, 1)
			mux := sdk.NewMux()
			mux.Handle("parent", func(ctx context.Context, job *sdk.Job) error {
				if job.AttemptType != "initial" {
					again <- job.AttemptType
					return nil
				}
				ch, err := c.Flow(job.FlowID()).Add(ctx, sdk.ExecutionSpec{Lane: "late", Kind: "child"})
				if err != nil {
					return err
				}
				valkeytest.Eventually(t, 30*time.Second, "child done before the wait", func() bool {
					st, err := c.State(ctx, ch)
					return err == nil && st.PublicState == model.PublicCompleted
				})
				if be.dispatch != nil {
					be.dispatch(t, ctx, c)
				}
				if err := job.WaitForChildren(ctx, ch); err != nil {
					t.Errorf("wait for children: %v", err)
					return err
				}
				return nil
			})
			mux.Handle("child", func(context.Context, *sdk.Job) error { return nil })
			w := worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"late"}, Concurrency: 2, ResolveDependencies: true})
			stop := runWorker(t, ctx, w, mux.ServeJob)
			select {
			case typ := <-again:
				if typ != "resumed" {
					t.Fatalf("parent ran again as %q, want resumed", typ)
				}
			case <-ctx.Done():
				st, _ := c.State(context.Background(), parent)
				t.Fatalf("parent never ran again: %+v", st)
			}
			valkeytest.Eventually(t, 30*time.Second, "parent completed", func() bool {
				st, err := c.State(ctx, parent)
				return err == nil && st.PublicState == model.PublicCompleted
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
