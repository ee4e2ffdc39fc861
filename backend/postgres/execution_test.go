package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

var parts = model.DefaultPartitionConfig()

// execOpts are nil-means-default options of newExec.
type execOpts struct {
	lane       string
	policy     string
	delayUntil int64
	flow       model.UUID
}

func newExec(t *testing.T, c *postgres.Client, o *execOpts) model.ExecutionID {
	t.Helper()
	if o == nil {
		o = &execOpts{}
	}
	lane := o.lane
	if lane == "" {
		lane = "lane-a"
	}
	id := parts.NewSoloExecutionID(lane)
	if !o.flow.IsZero() {
		id = parts.NewFlowExecutionID(o.flow)
	}
	res, err := c.CreateExecution(context.Background(), &postgres.CreateExecutionParams{
		ExecutionID: id, FlowID: o.flow, Namespace: "ns", LaneID: lane, ExecutionKind: "test",
		PolicyJSON: o.policy, Payload: []byte("in"), DelayUntil: o.delayUntil,
	})
	if err != nil || res.Duplicate {
		t.Fatalf("create: %+v %v", res, err)
	}
	return id
}

func claim(t *testing.T, c *postgres.Client, lane string) *postgres.ClaimResult {
	t.Helper()
	if lane == "" {
		lane = "lane-a"
	}
	r, err := c.ClaimForWorker(context.Background(), &postgres.ClaimForWorkerParams{
		LaneID: lane, WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: 30_000})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return r
}

// coreRow is the exec_core state tests assert on.
type coreRow struct {
	Phase, Ownership, Eligibility, Public, Attempt string
	AttemptIndex                                   int
}

func core(t *testing.T, c *postgres.Client, id model.ExecutionID) coreRow {
	t.Helper()
	var r coreRow
	err := c.Pool().QueryRow(context.Background(), `SELECT lifecycle_phase, ownership_state, eligibility_state, public_state,
 attempt_state, attempt_index FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2::uuid`,
		int16(id.Partition().Index), id.UUIDString()).Scan(&r.Phase, &r.Ownership, &r.Eligibility, &r.Public, &r.Attempt, &r.AttemptIndex)
	if err != nil {
		t.Fatalf("read exec_core %s: %v", id, err)
	}
	return r
}

func count(t *testing.T, c *postgres.Client, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := c.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func leaseEvents(t *testing.T, c *postgres.Client, id model.ExecutionID) string {
	t.Helper()
	var s string
	c.Pool().QueryRow(context.Background(), `SELECT COALESCE(string_agg(event_type || ':' || COALESCE(namespace, '-'), ',' ORDER BY event_id), '')
 FROM ff_lease_event WHERE execution_id = $1`, id.UUIDString()).Scan(&s)
	return s
}

func TestExecution(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)

	t.Run("CreateClaimComplete", func(t *testing.T) {
		id := newExec(t, c, &execOpts{lane: "ccc"})
		if got := core(t, c, id); got != (coreRow{"runnable", "unowned", "eligible_now", "waiting", "pending", 0}) {
			t.Fatalf("after create: %+v", got)
		}
		// The same id and payload again (a retry) is a duplicate; another
		// payload under the id is a conflict.
		dup, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, LaneID: "ccc", Payload: []byte("in")})
		if err != nil || !dup.Duplicate {
			t.Fatalf("second create: %+v %v", dup, err)
		}
		if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, LaneID: "ccc"}); !errors.Is(err, postgres.CodeExecutionConflict) {
			t.Fatalf("the id without its payload: %v, want %s", err, postgres.CodeExecutionConflict)
		}
		r := claim(t, c, "ccc")
		if r.ExecutionID != id || r.LeaseEpoch != 1 || r.AttemptIndex != 0 || r.AttemptType != "initial" {
			t.Fatalf("claim: %+v", r)
		}
		if got := core(t, c, id); got != (coreRow{"active", "leased", "not_applicable", "running", "running_attempt", 0}) {
			t.Fatalf("after claim: %+v", got)
		}
		if _, err := c.ClaimForWorker(ctx, &postgres.ClaimForWorkerParams{LaneID: "ccc", LeaseTTLMs: 1000}); !errors.Is(err, postgres.CodeNoEligibleExecution) {
			t.Fatalf("second claim: %v", err)
		}
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence(), Result: []byte("out")}); err != nil {
			t.Fatal(err)
		}
		if got := core(t, c, id); got != (coreRow{"terminal", "unowned", "not_applicable", "completed", "attempt_terminal", 0}) {
			t.Fatalf("after complete: %+v", got)
		}
		var outcome, ns string
		c.Pool().QueryRow(ctx, `SELECT outcome, namespace FROM ff_completion_event WHERE execution_id = $1::uuid`, id.UUIDString()).Scan(&outcome, &ns)
		if outcome != "success" || ns != "ns" {
			t.Fatalf("completion event %q ns %q", outcome, ns)
		}
		if got := leaseEvents(t, c, id); got != "acquired:ns,revoked:ns" {
			t.Fatalf("lease events %s", got)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_attempt WHERE execution_id = $1::uuid AND outcome = 'success' AND lease_expires_at_ms IS NULL`, id.UUIDString()); n != 1 {
			t.Fatalf("attempt rows %d", n)
		}
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence()}); !errors.Is(err, postgres.CodeExecutionNotActive) {
			t.Fatalf("complete twice: %v", err)
		}
	})

	t.Run("ClaimExecutionByID", func(t *testing.T) {
		id := newExec(t, c, &execOpts{lane: "byid"})
		p := &postgres.ClaimExecutionParams{ExecutionID: id, WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: 1000}
		if _, err := c.ClaimExecution(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ClaimExecution(ctx, p); !errors.Is(err, postgres.CodeExecutionNotEligible) {
			t.Fatalf("claim twice: %v", err)
		}
		p.ExecutionID = parts.NewSoloExecutionID("byid")
		if _, err := c.ClaimExecution(ctx, p); !errors.Is(err, postgres.CodeExecutionNotFound) {
			t.Fatalf("missing: %v", err)
		}
		p.ExecutionID = "garbage"
		if _, err := c.ClaimExecution(ctx, p); !errors.Is(err, postgres.CodeInvalidInput) {
			t.Fatalf("garbage id: %v", err)
		}
	})

	t.Run("CapabilitiesFilterClaims", func(t *testing.T) {
		id := parts.NewSoloExecutionID("caps")
		if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, LaneID: "caps",
			PolicyJSON: `{"routing_requirements":{"required_capabilities":["gpu"]}}`}); err != nil {
			t.Fatal(err)
		}
		p := &postgres.ClaimForWorkerParams{LaneID: "caps", LeaseTTLMs: 1000, Capabilities: []string{"cpu"}}
		if _, err := c.ClaimForWorker(ctx, p); !errors.Is(err, postgres.CodeNoEligibleExecution) {
			t.Fatalf("cpu worker: %v", err)
		}
		p.Capabilities = []string{"cpu", "gpu"}
		if r, err := c.ClaimForWorker(ctx, p); err != nil || r.ExecutionID != id {
			t.Fatalf("gpu worker: %+v %v", r, err)
		}
	})

	t.Run("FailRetriesWithBackoffThenFailsTerminally", func(t *testing.T) {
		id := newExec(t, c, &execOpts{lane: "fail", policy: `{"retry_policy":{"max_retries":1,"backoff":{"type":"fixed","delay_ms":60000}}}`})
		r := claim(t, c, "fail")
		fr, err := c.FailExecution(ctx, &postgres.FailExecutionParams{ExecutionID: id, Fence: r.Fence(), FailureReason: "boom", FailureCategory: "transient"})
		if err != nil || !fr.RetryScheduled || fr.DelayUntil < time.Now().UnixMilli()+59_000 {
			t.Fatalf("first fail: %+v %v", fr, err)
		}
		if got := core(t, c, id); got != (coreRow{"runnable", "unowned", "not_eligible_until_time", "delayed", "pending_retry_attempt", 1}) {
			t.Fatalf("after retry: %+v", got)
		}
		if _, err := c.ClaimForWorker(ctx, &postgres.ClaimForWorkerParams{LaneID: "fail", LeaseTTLMs: 1000}); !errors.Is(err, postgres.CodeNoEligibleExecution) {
			t.Fatalf("claim during backoff: %v", err)
		}
		// The delayed promoter (absent upstream) makes it claimable once due.
		res, err := c.PromoteDelayedDue(ctx, id.Partition().Index, fr.DelayUntil, 0)
		if err != nil || res.Acted != 1 {
			t.Fatalf("promote: %+v %v", res, err)
		}
		r2 := claim(t, c, "fail")
		if r2.ExecutionID != id || r2.AttemptIndex != 1 || r2.AttemptType != "retry" || r2.LeaseEpoch != 1 {
			t.Fatalf("retry claim: %+v", r2)
		}
		if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence()}); !errors.Is(err, postgres.CodeStaleLease) {
			t.Fatalf("old fence: %v", err)
		}
		fr, err = c.FailExecution(ctx, &postgres.FailExecutionParams{ExecutionID: id, Fence: r2.Fence(), FailureReason: "boom again"})
		if err != nil || fr.RetryScheduled {
			t.Fatalf("second fail: %+v %v", fr, err)
		}
		if got := core(t, c, id); got.Phase != "terminal" || got.Public != "failed" {
			t.Fatalf("after terminal fail: %+v", got)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = 'failed'`, id.UUIDString()); n != 1 {
			t.Fatalf("failed events %d", n)
		}
	})

	t.Run("RenewAndDelay", func(t *testing.T) {
		id := newExec(t, c, &execOpts{lane: "delay"})
		r := claim(t, c, "delay")
		exp, err := c.RenewLease(ctx, &postgres.RenewLeaseParams{ExecutionID: id, Fence: r.Fence(), LeaseTTLMs: 120_000})
		if err != nil || exp <= r.ExpiresAt {
			t.Fatalf("renew: %d %v", exp, err)
		}
		bad := r.Fence()
		bad.LeaseEpoch++
		if _, err := c.RenewLease(ctx, &postgres.RenewLeaseParams{ExecutionID: id, Fence: bad, LeaseTTLMs: 1000}); !errors.Is(err, postgres.CodeStaleLease) {
			t.Fatalf("renew with stale epoch: %v", err)
		}
		until := time.Now().UnixMilli() + 3_600_000
		if err := c.DelayExecution(ctx, &postgres.DelayExecutionParams{ExecutionID: id, Fence: r.Fence(), DelayUntil: until}); err != nil {
			t.Fatal(err)
		}
		if got := core(t, c, id); got != (coreRow{"runnable", "unowned", "not_eligible_until_time", "delayed", "attempt_interrupted", 0}) {
			t.Fatalf("after delay: %+v", got)
		}
		if st, err := c.PromoteDelayed(ctx, &postgres.PromoteDelayedParams{ExecutionID: id, NowMs: until - 1}); err != nil || st != postgres.PromoteNotYetDue {
			t.Fatalf("early promote: %s %v", st, err)
		}
		if st, err := c.PromoteDelayed(ctx, &postgres.PromoteDelayedParams{ExecutionID: id, NowMs: until}); err != nil || st != postgres.PromotePromoted {
			t.Fatalf("promote: %s %v", st, err)
		}
		if st, _ := c.PromoteDelayed(ctx, &postgres.PromoteDelayedParams{ExecutionID: id, NowMs: until}); st != postgres.PromoteNotDelayedCleaned {
			t.Fatalf("promote twice: %s", st)
		}
		r2 := claim(t, c, "delay")
		if r2.AttemptIndex != 0 || r2.LeaseEpoch != 2 || r2.AttemptType != "resumed" {
			t.Fatalf("claim after delay: %+v", r2)
		}
		if got := leaseEvents(t, c, id); got != "acquired:ns,renewed:ns,revoked:ns,acquired:ns" {
			t.Fatalf("lease events %s", got)
		}
	})

	t.Run("RollbackLeavesDatabaseUnchanged", func(t *testing.T) {
		// A trigger that fails the last write of CompleteExecution (its lease
		// event) after the attempt, exec_core and completion outbox writes.
		rc := pgtest.Client(t, postgres.ClientConfig{})
		id := newExec(t, rc, &execOpts{lane: "rb"})
		r := claim(t, rc, "rb")
		if _, err := rc.Pool().Exec(ctx, `
CREATE FUNCTION fail_revoke() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.event_type = 'revoked' THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$;
CREATE TRIGGER fail_revoke BEFORE INSERT ON ff_lease_event FOR EACH ROW EXECUTE FUNCTION fail_revoke();`); err != nil {
			t.Fatal(err)
		}
		snapshot := func() string {
			var s string
			rc.Pool().QueryRow(ctx, `SELECT (SELECT row_to_json(c)::text FROM ff_exec_core c WHERE c.execution_id = $1::uuid) ||
 (SELECT json_agg(a ORDER BY attempt_index)::text FROM ff_attempt a WHERE a.execution_id = $1::uuid) ||
 (SELECT count(*)::text FROM ff_completion_event) || (SELECT count(*)::text FROM ff_lease_event)`, id.UUIDString()).Scan(&s)
			return s
		}
		before := snapshot()
		err := rc.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: id, Fence: r.Fence(), Result: []byte("x")})
		if err == nil || !strings.Contains(err.Error(), "injected failure") {
			t.Fatalf("complete: %v", err)
		}
		if after := snapshot(); after != before {
			t.Fatalf("database changed by a rolled-back operation:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// TestUpstreamGaps covers the two Postgres gaps of upstream the spec lists:
// executions created "submitted" were never claimable, and delayed
// executions were never promoted. Each assertion fails on upstream's
// behaviour.
func TestUpstreamGaps(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)

	t.Run("SubmittedBecomesRunnable", func(t *testing.T) {
		// A row exactly as upstream's create_execution writes it.
		id := parts.NewSoloExecutionID("sub")
		if _, err := c.Pool().Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase,
 ownership_state, eligibility_state, public_state, attempt_state, created_at_ms, raw_fields)
VALUES ($1, $2::uuid, 'sub', 'submitted', 'unowned', 'eligible_now', 'waiting', 'pending', $3, '{"namespace":"ns"}')`,
			int16(id.Partition().Index), id.UUIDString(), time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ClaimForWorker(ctx, &postgres.ClaimForWorkerParams{LaneID: "sub", LeaseTTLMs: 1000}); !errors.Is(err, postgres.CodeNoEligibleExecution) {
			t.Fatalf("submitted row claimable before promotion: %v", err)
		}
		res, err := c.PromoteSubmitted(ctx, id.Partition().Index, time.Now().UnixMilli(), 0)
		if err != nil || res.Acted != 1 {
			t.Fatalf("promote submitted: %+v %v", res, err)
		}
		if r := claim(t, c, "sub"); r.ExecutionID != id {
			t.Fatalf("claimed %s", r.ExecutionID)
		}
		// fabric's own create needs no promotion.
		id2 := newExec(t, c, &execOpts{lane: "sub"})
		if r := claim(t, c, "sub"); r.ExecutionID != id2 {
			t.Fatalf("claimed %s", r.ExecutionID)
		}
	})

	t.Run("DelayedIsPromoted", func(t *testing.T) {
		due := time.Now().UnixMilli() + 60_000
		id := newExec(t, c, &execOpts{lane: "dl", delayUntil: due})
		if got := core(t, c, id); got.Eligibility != "not_eligible_until_time" || got.Public != "delayed" {
			t.Fatalf("after delayed create: %+v", got)
		}
		p := id.Partition().Index
		if res, _ := c.PromoteDelayedDue(ctx, p, due-1, 0); res.Scanned != 0 {
			t.Fatalf("promoted early: %+v", res)
		}
		res, err := c.PromoteDelayedDue(ctx, p, due, 0)
		if err != nil || res.Acted != 1 {
			t.Fatalf("promote due: %+v %v", res, err)
		}
		if r := claim(t, c, "dl"); r.ExecutionID != id {
			t.Fatalf("claimed %s", r.ExecutionID)
		}
	})
}

// TestConcurrentWorkersExactlyOnce: K goroutines claim and complete N
// executions; each is completed exactly once.
func TestConcurrentWorkersExactlyOnce(t *testing.T) {
	t.Parallel()
	const n, k = 200, 8
	c := pgtest.Client(t, postgres.ClientConfig{MaxConns: k + 2})
	ctx := pgtest.Context(t, 2*time.Minute)
	for i := 0; i < n; i++ {
		newExec(t, c, &execOpts{lane: "race"})
	}
	var done atomic.Int64
	seen := sync.Map{}
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for w := 0; w < k; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				r, err := c.ClaimForWorker(ctx, &postgres.ClaimForWorkerParams{LaneID: "race", WorkerID: "w",
					WorkerInstanceID: fmt.Sprint("wi", w), LeaseTTLMs: 60_000})
				if errors.Is(err, postgres.CodeNoEligibleExecution) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				if _, dup := seen.LoadOrStore(r.ExecutionID, w); dup {
					errs <- fmt.Errorf("%s claimed twice", r.ExecutionID)
					return
				}
				if err := c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: r.ExecutionID, Fence: r.Fence()}); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if done.Load() != n {
		t.Fatalf("completed %d of %d", done.Load(), n)
	}
	if got := count(t, c, `SELECT count(DISTINCT execution_id) FROM ff_completion_event WHERE outcome = 'success'`); got != n {
		t.Fatalf("%d distinct success events", got)
	}
	if got := count(t, c, `SELECT count(*) FROM ff_completion_event`); got != n {
		t.Fatalf("%d completion events", got)
	}
	if got := count(t, c, `SELECT count(*) FROM ff_attempt WHERE lease_epoch = 1 AND outcome = 'success'`); got != n {
		t.Fatalf("%d single-epoch successful attempts", got)
	}
}
