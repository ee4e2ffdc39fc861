package sdk_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// readCounter is a real driver whose ExecutionState calls are counted, so
// a test can tell a pushed Wait from a polling one.
type readCounter struct {
	driver
	reads *atomic.Int64
}

// driver names the embedded driver apart from the Provider method.
type driver = backend.Driver

func (d readCounter) Driver() backend.Driver { return d }

func (d readCounter) BindPartitions(p model.PartitionConfig) backend.Driver {
	return readCounter{driver: d.driver.BindPartitions(p), reads: d.reads}
}

func (d readCounter) ExecutionState(ctx context.Context, id model.ExecutionID) (*backend.ExecutionState, error) {
	d.reads.Add(1)
	return d.driver.ExecutionState(ctx, id)
}

// TestWaitIsPushed: Client.Wait returns an execution's final state as its
// completion commits, on both backends, reading the state only when woken
// — no read while the execution runs (a polling Wait reads every 250 ms
// and fails here) — and returns at once for one already terminal.
func TestWaitIsPushed(t *testing.T) {
	t.Parallel()
	for _, be := range []struct {
		name string
		prov func(t *testing.T) backend.Provider
	}{
		{"Valkey", func(t *testing.T) backend.Provider { return valkeytest.Client(t) }},
		{"Postgres", func(t *testing.T) backend.Provider { return pgtest.Client(t, postgres.ClientConfig{}) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			ctx := valkeytest.Context(t, 3*time.Minute)
			raw := be.prov(t)
			var reads atomic.Int64
			c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: readCounter{driver: raw.Driver(), reads: &reads}, Logger: valkeytest.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w, err := sdk.Connect(ctx, raw, sdk.WorkerConfig{WorkerID: "waiter", Lanes: []string{"wait"}, Logger: valkeytest.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close(context.Background())
			id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "wait", Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			l := claimOne(t, ctx, w)

			type outcome struct {
				st  *sdk.ExecutionState
				err error
				at  time.Time
			}
			done := make(chan outcome, 1)
			go func() {
				st, err := c.Wait(ctx, id)
				done <- outcome{st, err, time.Now()}
			}()
			// The first read, and the one the watch's coming up wakes.
			valkeytest.Eventually(t, time.Minute, "Wait's reads before and after its watch is up", func() bool { return reads.Load() >= 2 })
			before := reads.Load()
			// Time passing is what is measured here: a polling Wait reads
			// twice in this window.
			time.Sleep(600 * time.Millisecond)
			if n := reads.Load(); n != before {
				t.Fatalf("Wait read the state %d times while the execution ran: it polls", n-before)
			}
			if err := l.Complete(ctx, []byte("done")); err != nil {
				t.Fatal(err)
			}
			completed := time.Now()
			o := <-done
			if o.err != nil || o.st.PublicState != model.PublicCompleted {
				t.Fatalf("Wait: %+v %v", o.st, o.err)
			}
			latency := o.at.Sub(completed)
			t.Logf("%s: Wait returned %v after Complete returned; %d reads in all", be.name, latency, reads.Load())
			if latency > 200*time.Millisecond {
				t.Fatalf("Wait returned %v after the completion", latency)
			}
			if n := reads.Load() - before; n > 2 {
				t.Fatalf("%d reads after the completion, want 1 (2 with a stray wake-up)", n)
			}

			// Already terminal: at once. A cancelled context and a bad id.
			if st, err := c.Wait(ctx, id); err != nil || !st.Terminal() {
				t.Fatalf("Wait on a terminal execution: %+v %v", st, err)
			}
			other, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "wait", Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if _, err := c.Wait(short, other); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait past its context: %v", err)
			}
			if _, err := c.Wait(ctx, "garbage"); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("Wait on garbage: %v", err)
			}
		})
	}
}
