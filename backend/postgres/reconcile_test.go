package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
)

// attemptDeadline reads the current attempt's own deadline
// (pgsql.AttemptDeadlineField) of id; it fails the test when the attempt
// has none.
func attemptDeadline(t *testing.T, c *postgres.Client, id model.ExecutionID) int64 {
	t.Helper()
	var d *int64
	err := c.Pool().QueryRow(context.Background(), `SELECT (a.raw_fields->>'`+pgsql.AttemptDeadlineField+`')::bigint
  FROM ff_attempt a JOIN ff_exec_core e ON e.partition_key = a.partition_key AND e.execution_id = a.execution_id
   AND e.attempt_index = a.attempt_index
 WHERE a.partition_key = $1 AND a.execution_id = $2::uuid`, int16(id.Partition().Index), id.UUIDString()).Scan(&d)
	if err != nil || d == nil {
		t.Fatalf("attempt deadline of %s: %v %v", id, d, err)
	}
	return *d
}

// TestReconcileAttemptTimeouts: the attempt-timeout reconciler fires on
// the attempt's own deadline (the claim's now +
// timeout_policy.attempt_timeout_ms), never on a lease's expiry alone —
// an expired lease is the lease-expiry reconciler's, which leaves the
// execution to be reclaimed.
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

	// The attempt's timeout (60 s) outlasts its lease (claim's 30 s TTL),
	// so between the two the lease has run out and the attempt has not.
	const timeoutPolicy = `"timeout_policy":{"attempt_timeout_ms":60000}`
	flow := model.NewUUID()
	retry := newExec(t, c, &execOpts{lane: "to", flow: flow, policy: `{"retry_policy":{"max_retries":1},` + timeoutPolicy + `}`})
	r1 := claim(t, c, "to")
	if r1.ExecutionID != retry {
		t.Fatalf("claimed %s", r1.ExecutionID)
	}
	deadline := attemptDeadline(t, c, retry)
	if deadline <= r1.ExpiresAt {
		t.Fatalf("deadline %d not after the lease's expiry %d", deadline, r1.ExpiresAt)
	}
	later := deadline + 1
	part := retry.Partition().Index
	var plain model.ExecutionID // LeaseExpiryAloneIsNoTimeout's, completed by its worker

	t.Run("NotYetExpiredIsNotTouched", func(t *testing.T) {
		res, err := c.ReconcileAttemptTimeouts(ctx, part, deadline-1, 0)
		if err != nil || res.Scanned != 0 {
			t.Fatalf("%+v %v", res, err)
		}
	})

	t.Run("LeaseExpiryAloneIsNoTimeout", func(t *testing.T) {
		// The lease ran out, the attempt's deadline has not passed.
		res, err := c.ReconcileAttemptTimeouts(ctx, part, r1.ExpiresAt+1, 0)
		if err != nil || res.Scanned != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		if got := core(t, c, retry); got.Phase != "active" || got.AttemptIndex != 0 {
			t.Fatalf("after a pass past the lease's expiry: %+v", got)
		}
		// An attempt without a timeout never times out, however late.
		plain = newExec(t, c, &execOpts{lane: "to-plain"})
		rp := claim(t, c, "to-plain")
		if rp.ExecutionID != plain {
			t.Fatalf("claimed %s", rp.ExecutionID)
		}
		for _, now := range []int64{rp.ExpiresAt + 1, later + 3_600_000} {
			acted, err := c.ExpireAttemptTimeout(ctx, &postgres.ExpireAttemptTimeoutParams{ExecutionID: plain, NowMs: now})
			if err != nil || acted {
				t.Fatalf("at %d: acted %v, %v", now, acted, err)
			}
			res, err := c.ReconcileAttemptTimeouts(ctx, plain.Partition().Index, now, 0)
			if err != nil || res.Acted != 0 {
				t.Fatalf("at %d: %+v %v", now, res, err)
			}
		}
		if got := core(t, c, plain); got.Phase != "active" || got.Ownership != "leased" {
			t.Fatalf("an attempt without a timeout timed out: %+v", got)
		}
		if got := leaseEvents(t, c, plain); got != "acquired:ns" {
			t.Fatalf("lease events %s", got)
		}
		// Its worker still holds it.
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: plain, Fence: rp.Fence()}); err != nil {
			t.Fatalf("complete: %v", err)
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
		// The retry is a new attempt with its own deadline.
		d2 := attemptDeadline(t, c, retry)
		if d2 <= deadline {
			t.Fatalf("retry's deadline %d not after the first attempt's %d", d2, deadline)
		}
		if res, err := c.ReconcileAttemptTimeouts(ctx, part, r2.ExpiresAt+1, 0); err != nil || res.Scanned != 0 {
			t.Fatalf("past the retry's lease, before its deadline: %+v %v", res, err)
		}
		res, err := c.ReconcileAttemptTimeouts(ctx, part, d2+1, 0)
		if err != nil || res.Acted != 1 {
			t.Fatalf("%+v %v", res, err)
		}
		if got := core(t, c, retry); got.Phase != "terminal" || got.Public != "expired" || got.Attempt != "attempt_terminal" {
			t.Fatalf("after exhausted timeout: %+v", got)
		}
		for {
			select {
			case ev := <-sub.C:
				if ev.ExecutionID == plain && ev.Outcome == "success" {
					continue
				}
				if ev.ExecutionID != retry || ev.Outcome != "expired" || ev.FlowID != flow || ev.OccurredAtMs != d2+1 {
					t.Fatalf("event %+v", ev)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("LISTENing subscriber received no completion event (err %v)", sub.Err())
			}
			break
		}
	})

	t.Run("ConcurrentCompletionWins", func(t *testing.T) {
		// A worker completing while the reconciler runs: exactly one of the
		// two transitions happens, never both.
		for i := 0; i < 10; i++ {
			lane := fmt.Sprint("race-to-", i)
			id := newExec(t, c, &execOpts{lane: lane, policy: `{` + timeoutPolicy + `}`})
			r := claim(t, c, lane)
			now := attemptDeadline(t, c, id) + 1
			var wg sync.WaitGroup
			var cerr, xerr error
			var acted bool
			wg.Add(2)
			go func() {
				defer wg.Done()
				acted, xerr = c.ExpireAttemptTimeout(ctx, &postgres.ExpireAttemptTimeoutParams{ExecutionID: id, NowMs: now})
			}()
			go func() {
				defer wg.Done()
				cerr = c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence()})
			}()
			wg.Wait()
			if xerr != nil {
				t.Fatalf("expire: %v", xerr)
			}
			got := core(t, c, id)
			n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid`, id.UUIDString())
			switch {
			case cerr == nil && !acted && got.Public == "completed" && n == 1:
			case errors.Is(cerr, postgres.CodeExecutionNotActive) && acted && got.Public == "expired" && n == 1:
			default:
				t.Fatalf("complete err %v, expired %v, state %+v, %d events", cerr, acted, got, n)
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
