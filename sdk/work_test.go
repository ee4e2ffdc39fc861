package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestWorkerWork: Worker.Work runs one given execution in the calling
// goroutine on both backends — a nil return completes it with its result,
// a Permanent error fails it for good, an error retries it under its
// policy — and a terminal execution is refused without running the
// handler.
func TestWorkerWork(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 2*time.Minute)
			w := worker(sdk.WorkerConfig{WorkerID: "work", Lanes: []string{"work"}})
			enqueue := func(opts ...sdk.EnqueueOption) model.ExecutionID {
				id, err := c.Enqueue(ctx, "k", []byte("in"), append(opts, sdk.WithLane("work"))...)
				if err != nil {
					t.Fatal(err)
				}
				return id
			}

			ok := enqueue()
			err := w.Work(ctx, ok, func(_ context.Context, job *sdk.Job) error {
				job.SetResult(append([]byte("out:"), job.Payload...))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.State(ctx, ok); err != nil || st.PublicState != model.PublicCompleted {
				t.Fatalf("after Work returned nil: %+v %v", st, err)
			}
			if r, err := c.Result(ctx, ok); err != nil || string(r) != "out:in" {
				t.Fatalf("result %q %v", r, err)
			}

			bad := enqueue()
			boom := errors.New("boom")
			if err := w.Work(ctx, bad, func(context.Context, *sdk.Job) error { return sdk.Permanent(boom) }); !errors.Is(err, boom) {
				t.Fatalf("Work returned %v, want the handler's error", err)
			}
			if st, err := c.State(ctx, bad); err != nil || st.PublicState != model.PublicFailed {
				t.Fatalf("after a permanent error: %+v %v", st, err)
			}

			retried := enqueue(sdk.WithRetry(3, sdk.FixedBackoff(time.Minute)))
			if err := w.Work(ctx, retried, func(context.Context, *sdk.Job) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("Work returned %v", err)
			}
			if st, err := c.State(ctx, retried); err != nil || st.Terminal() {
				t.Fatalf("after a retryable error: %+v %v", st, err)
			}

			ran := false
			err = w.Work(ctx, ok, func(context.Context, *sdk.Job) error { ran = true; return nil })
			if !errors.Is(err, sdk.ErrNotClaimable) || ran {
				t.Fatalf("Work on a completed execution: %v (handler ran: %v)", err, ran)
			}
		})
	}
}
