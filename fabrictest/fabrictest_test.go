package fabrictest_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/fabric-host/fabric/fabrictest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

func TestMain(m *testing.M) { os.Exit(fabrictest.Main(m)) }

// kitBackends are the kit's two backends, for tests that run on both.
var kitBackends = []struct {
	name string
	open func(testing.TB) *sdk.Client
}{{"Valkey", fabrictest.Valkey}, {"Postgres", fabrictest.Postgres}}

// TestDrain: on both of the kit's backends, Drain runs every eligible
// execution of a lane in the test's goroutine — including one a handler
// enqueued while it ran — and leaves each ended as its handler said.
func TestDrain(t *testing.T) {
	t.Parallel()
	for _, be := range kitBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c := be.open(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var ids []model.ExecutionID
			for _, kind := range []string{"ok", "ok", "fail", "spawn"} {
				id, err := c.Enqueue(ctx, kind, nil, sdk.WithLane("kit"))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			var spawned model.ExecutionID
			n := fabrictest.Drain(t, c, "kit", func(ctx context.Context, job *sdk.Job) error {
				switch job.Kind {
				case "fail":
					return sdk.Permanent(errors.New("no"))
				case "spawn":
					id, err := c.Enqueue(ctx, "ok", nil, sdk.WithLane("kit"))
					spawned = id
					return err
				}
				return nil
			})
			if n != 5 {
				t.Fatalf("Drain ran %d executions, want 5", n)
			}
			want := map[model.ExecutionID]string{ids[0]: model.PublicCompleted, ids[1]: model.PublicCompleted,
				ids[2]: model.PublicFailed, ids[3]: model.PublicCompleted, spawned: model.PublicCompleted}
			for id, public := range want {
				if st, err := c.State(ctx, id); err != nil || st.PublicState != public {
					t.Fatalf("%s after Drain: %+v %v, want %s", id, st, err, public)
				}
			}
			if n := fabrictest.Drain(t, c, "kit", nil); n != 0 {
				t.Fatalf("a drained lane ran %d more", n)
			}
		})
	}
}

// welcome is a job argument type naming its kind.
type welcome struct {
	To   string `json:"to"`
	Name string `json:"name"`
}

func (welcome) Kind() string { return "email.welcome" }

// TestRequireEnqueued: RequireEnqueued finds an execution by kind, lane,
// arguments (as JSON values) and tags on both backends, and a test that
// asks for one never enqueued fails.
func TestRequireEnqueued(t *testing.T) {
	t.Parallel()
	for _, be := range kitBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c := be.open(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, to := range []string{"ann@example.com", "bob@example.com"} {
				if _, err := sdk.EnqueueArgs(ctx, c, welcome{To: to, Name: "x"}, sdk.WithLane("mail"), sdk.WithTag("app.campaign", "spring")); err != nil {
					t.Fatal(err)
				}
			}
			d := fabrictest.RequireEnqueued(t, c, fabrictest.Enqueued{Kind: "email.welcome", Lane: "mail",
				Args: map[string]string{"name": "x", "to": "bob@example.com"}, Tags: map[string]string{"app.campaign": "spring"}})
			if d.Tags["app.campaign"] != "spring" {
				t.Fatalf("found %+v", d)
			}
			// A kit assertion that fails: run on a recorder, not on t.
			rec := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				fabrictest.RequireEnqueued(rec, c, fabrictest.Enqueued{Kind: "email.welcome", Args: welcome{To: "cy@example.com"}})
			}()
			<-done
			if !rec.failed {
				t.Fatal("RequireEnqueued of arguments never enqueued did not fail")
			}
		})
	}
}

// recorder is a testing.TB whose Fatal records the failure and ends the
// goroutine, as testing's does, without failing the real test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(string, ...any) {
	r.failed = true
	runtime.Goexit()
}

func (r *recorder) Fatal(...any) {
	r.failed = true
	runtime.Goexit()
}
