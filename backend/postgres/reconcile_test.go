package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

func TestReconcileAttemptTimeouts(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)

	// A listener on a dedicated connection, as a dispatcher would run it.
	sub, err := c.SubscribeCompletions(ctx, &postgres.SubscribeCompletionsParams{AfterEventID: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)

	flow := model.NewUUID()
	retry := newExec(t, c, &execOpts{lane: "to", flow: flow, policy: `{"retry_policy":{"max_retries":1}}`})
	r1 := claim(t, c, "to")
	if r1.ExecutionID != retry {
		t.Fatalf("claimed %s", r1.ExecutionID)
	}
	later := r1.ExpiresAt + 1
	part := retry.Partition().Index

	t.Run("NotYetExpiredIsNotTouched", func(t *testing.T) {
		res, err := c.ReconcileAttemptTimeouts(ctx, part, r1.ExpiresAt-1, 0)
		if err != nil || res.Scanned != 0 {
			t.Fatalf("%+v %v", res, err)
		}
	})

	t.Run("RetriesWhenRetriesRemain", func(t *testing.T) {
		res, err := c.ReconcileAttemptTimeouts(ctx, part, later, 0)
		if err != nil || res.Acted != 1 || res.Errors != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		if got := core(t, c, retry); got != (coreRow{"runnable", "unowned", "eligible_now", "waiting", "pending_retry_attempt", 1}) {
			t.Fatalf("after timeout: %+v", got)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_attempt WHERE execution_id = $1::uuid AND attempt_index = 0
 AND outcome = 'interrupted' AND lease_expires_at_ms IS NULL AND terminal_at_ms = $2`, retry.UUIDString(), later); n != 1 {
			t.Fatal("timed-out attempt not interrupted")
		}
		if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid`, retry.UUIDString()); n != 0 {
			t.Fatalf("%d completion events for a retry", n)
		}
		if got := leaseEvents(t, c, retry); got != "acquired:ns,expired:ns" {
			t.Fatalf("lease events %s", got)
		}
		// The stale worker is fenced out.
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: retry, Fence: r1.Fence()}); !errors.Is(err, postgres.CodeStaleLease) {
			t.Fatalf("stale complete: %v", err)
		}
		// A second pass finds nothing.
		if res, _ := c.ReconcileAttemptTimeouts(ctx, part, later, 0); res.Scanned != 0 {
			t.Fatalf("second pass: %+v", res)
		}
	})

	t.Run("ExhaustedExpiresAndEmitsCompletion", func(t *testing.T) {
		r2 := claim(t, c, "to")
		if r2.ExecutionID != retry || r2.AttemptIndex != 1 {
			t.Fatalf("retry claim %+v", r2)
		}
		res, err := c.ReconcileAttemptTimeouts(ctx, part, r2.ExpiresAt+1, 0)
		if err != nil || res.Acted != 1 {
			t.Fatalf("%+v %v", res, err)
		}
		if got := core(t, c, retry); got.Phase != "terminal" || got.Public != "expired" || got.Attempt != "attempt_terminal" {
			t.Fatalf("after exhausted timeout: %+v", got)
		}
		select {
		case ev := <-sub.C:
			if ev.ExecutionID != retry || ev.Outcome != "expired" || ev.FlowID != flow || ev.OccurredAtMs != r2.ExpiresAt+1 {
				t.Fatalf("event %+v", ev)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("LISTENing subscriber received no completion event (err %v)", sub.Err())
		}
	})

	t.Run("ConcurrentCompletionWins", func(t *testing.T) {
		// A worker completing while the reconciler runs: exactly one of the
		// two transitions happens, never both.
		for i := 0; i < 10; i++ {
			id := newExec(t, c, &execOpts{lane: fmt.Sprint("race-to-", i)})
			r := claim(t, c, fmt.Sprint("race-to-", i))
			var wg sync.WaitGroup
			var cerr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				c.ExpireAttemptTimeout(ctx, &postgres.ExpireAttemptTimeoutParams{ExecutionID: id, NowMs: r.ExpiresAt + 1})
			}()
			go func() {
				defer wg.Done()
				cerr = c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence()})
			}()
			wg.Wait()
			got := core(t, c, id)
			n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid`, id.UUIDString())
			switch {
			case cerr == nil && got.Public == "completed" && n == 1:
			case errors.Is(cerr, postgres.CodeExecutionNotActive) && got.Public == "expired" && n == 1:
			default:
				t.Fatalf("complete err %v, state %+v, %d events", cerr, got, n)
			}
		}
	})
}

// TestThroughput measures create→claim→complete executions per second
// with 1 and 8 workers (logged with -v, not asserted).
func TestThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{MaxConns: 12})
	ctx := pgtest.Context(t, 2*time.Minute)
	for _, workers := range []int{1, 8} {
		const n = 400
		lane := fmt.Sprint("tp-", workers)
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		var created, completed atomic.Int64
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for completed.Load() < n {
					if created.Add(1) <= n {
						id := parts.NewSoloExecutionID(lane)
						if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, LaneID: lane}); err != nil {
							errs <- err
							return
						}
					}
					r, err := c.ClaimForWorker(ctx, &postgres.ClaimForWorkerParams{LaneID: lane, WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: 30_000})
					if errors.Is(err, postgres.CodeNoEligibleExecution) {
						continue // another worker holds or took it
					}
					if err != nil {
						errs <- err
						return
					}
					if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: r.ExecutionID, Fence: r.Fence()}); err != nil {
						errs <- err
						return
					}
					completed.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		el := time.Since(start)
		t.Logf("postgres create→claim→complete: %d workers, %d executions in %s = %.0f executions/s",
			workers, completed.Load(), el.Round(time.Millisecond), float64(completed.Load())/el.Seconds())
	}
}
