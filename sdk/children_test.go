package sdk_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestWaitForChildren: a flow member fans out two children at run time
// and waits for them; it runs again only after both completed, then
// completes. A job outside a flow cannot wait for children.
func TestWaitForChildren(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	flow, err := b.c.CreateFlow(b.ctx, "fanout")
	if err != nil {
		t.Fatal(err)
	}
	parent, err := flow.Add(b.ctx, sdk.ExecutionSpec{Lane: "fan", Kind: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	solo := b.create(t, sdk.ExecutionSpec{Lane: "fan", Kind: "solo"})

	var mu sync.Mutex
	var events []string
	var children []model.ExecutionID
	note := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	soloErr := make(chan error, 1)
	mux := sdk.NewMux()
	mux.Handle("parent", func(ctx context.Context, job *sdk.Job) error {
		if job.AttemptType != "initial" {
			for _, c := range children {
				if st := b.state(t, c); st.PublicState != model.PublicCompleted {
					t.Errorf("parent resumed while child %s is %s", c, st.PublicState)
				}
			}
			note("parent again (" + job.AttemptType + ")")
			return nil
		}
		f := b.c.Flow(job.FlowID())
		for range 2 {
			c, err := f.Add(ctx, sdk.ExecutionSpec{Lane: "fan", Kind: "child"})
			if err != nil {
				return err
			}
			children = append(children, c)
		}
		note("parent fans out")
		return job.WaitForChildren(ctx, children...)
	})
	mux.Handle("child", func(ctx context.Context, job *sdk.Job) error {
		time.Sleep(20 * time.Millisecond)
		note("child")
		return nil
	})
	mux.Handle("solo", func(ctx context.Context, job *sdk.Job) error {
		soloErr <- job.WaitForChildren(ctx, solo)
		return nil
	})
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"fan"}, Concurrency: 3, ResolveDependencies: true})
	stop := runWorker(t, b.ctx, w, mux.ServeJob)
	valkeytest.Eventually(t, 30*time.Second, "parent completed", func() bool {
		return b.state(t, parent).PublicState == model.PublicCompleted
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-soloErr; !errors.Is(err, sdk.ErrInvalidInput) {
		t.Fatalf("solo job waiting for children: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 4 || events[0] != "parent fans out" || events[1] != "child" || events[2] != "child" || events[3][:12] != "parent again" {
		t.Fatalf("events = %q", events)
	}
	t.Logf("events: %q", events)
}

// TestWaitForChildrenAlreadyDone: children that completed before the
// parent waits do not strand it: it is claimed again at once.
func TestWaitForChildrenAlreadyDone(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	flow, err := b.c.CreateFlow(b.ctx, "late-wait")
	if err != nil {
		t.Fatal(err)
	}
	parent, err := flow.Add(b.ctx, sdk.ExecutionSpec{Lane: "late", Kind: "parent"})
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
		c, err := b.c.Flow(job.FlowID()).Add(ctx, sdk.ExecutionSpec{Lane: "late", Kind: "child"})
		if err != nil {
			return err
		}
		valkeytest.Eventually(t, 30*time.Second, "child done before the wait", func() bool {
			return b.state(t, c).PublicState == model.PublicCompleted
		})
		err = job.WaitForChildren(ctx, c)
		if err != nil {
			t.Errorf("wait for children: %v", err)
		}
		return err
	})
	mux.Handle("child", func(context.Context, *sdk.Job) error { return nil })
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"late"}, Concurrency: 2, ResolveDependencies: true})
	stop := runWorker(t, b.ctx, w, mux.ServeJob)
	select {
	case <-again:
	case <-b.ctx.Done():
		m, _ := b.vc.ExecutionCore(context.Background(), parent)
		dm, _ := b.vc.Raw().Do(context.Background(), b.vc.Raw().B().Hgetall().Key(model.KeysFor(parent).DepsMeta()).Build()).AsStrMap()
		t.Fatalf("parent never ran again: %v\ndeps_meta %v", m, dm)
	}
	valkeytest.Eventually(t, 30*time.Second, "parent completed", func() bool {
		return b.state(t, parent).PublicState == model.PublicCompleted
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
