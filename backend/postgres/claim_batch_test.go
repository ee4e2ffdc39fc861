package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

// ClaimForWorkerN leases several executions in one statement, best
// first, each under its own attempt and lease, and never more than asked.
func TestClaimForWorkerN(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	for range 4 {
		newExec(t, c, &execOpts{lane: "batch"})
	}
	urgent := parts.NewSoloExecutionID("batch")
	if _, err := c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: urgent, LaneID: "batch",
		Namespace: "ns", Priority: 5}); err != nil {
		t.Fatal(err)
	}
	p := &postgres.ClaimForWorkerParams{LaneID: "batch", WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: 30_000}
	first, err := c.ClaimForWorkerN(ctx, p, 3)
	if err != nil || len(first) != 3 {
		t.Fatalf("claim 3: %d leases, %v", len(first), err)
	}
	got := map[model.ExecutionID]bool{}
	for _, r := range first {
		if r.LeaseEpoch != 1 || r.AttemptIndex != 0 || r.AttemptType != "initial" || r.LaneID != "batch" {
			t.Fatalf("lease %+v", r)
		}
		if s := core(t, c, r.ExecutionID); s.Phase != "active" || s.Ownership != "leased" {
			t.Fatalf("%s after claim: %+v", r.ExecutionID, s)
		}
		if ev := leaseEvents(t, c, r.ExecutionID); ev != "acquired:ns" {
			t.Fatalf("%s lease events %q", r.ExecutionID, ev)
		}
		got[r.ExecutionID] = true
	}
	if !got[urgent] {
		t.Fatalf("the priority-5 execution was not among the first claims")
	}
	rest, err := c.ClaimForWorkerN(ctx, p, 10)
	if err != nil || len(rest) != 2 {
		t.Fatalf("claim the rest: %d leases, %v", len(rest), err)
	}
	for _, r := range rest {
		if got[r.ExecutionID] {
			t.Fatalf("%s claimed twice", r.ExecutionID)
		}
		got[r.ExecutionID] = true
	}
	if len(got) != 5 {
		t.Fatalf("claimed %d distinct executions, want 5", len(got))
	}
	if _, err := c.ClaimForWorkerN(ctx, p, 2); !errors.Is(err, postgres.CodeNoEligibleExecution) {
		t.Fatalf("claim of an empty lane: %v", err)
	}
}

// One group-commit batch completes the rows whose fence holds and
// refuses, each on its own, a stale fence, an unknown execution and a
// second completion, exactly as lone calls would.
func TestCompleteGroupCommit(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)

	t.Run("MixedBatch", func(t *testing.T) {
		for range 4 {
			newExec(t, c, &execOpts{lane: "group"})
		}
		ls, err := c.ClaimForWorkerN(ctx, &postgres.ClaimForWorkerParams{LaneID: "group", WorkerID: "w",
			WorkerInstanceID: "wi", LeaseTTLMs: 30_000}, 4)
		if err != nil || len(ls) != 4 {
			t.Fatalf("claim: %d, %v", len(ls), err)
		}
		stale := ls[2].Fence()
		stale.LeaseEpoch++
		ps := []*postgres.CompleteExecutionParams{
			{ExecutionID: ls[0].ExecutionID, Fence: ls[0].Fence(), Result: []byte("r0")},
			{ExecutionID: ls[1].ExecutionID, Fence: ls[1].Fence()},
			{ExecutionID: ls[2].ExecutionID, Fence: stale, Result: []byte("stale")},
			{ExecutionID: parts.NewSoloExecutionID("group"), Fence: ls[3].Fence()},
			{ExecutionID: ls[3].ExecutionID, Fence: ls[3].Fence(), Result: []byte("r3")},
		}
		errs := c.CompleteBatchForTest(ctx, ps)
		for _, i := range []int{0, 1, 4} {
			if errs[i] != nil {
				t.Fatalf("item %d: %v", i, errs[i])
			}
			if s := core(t, c, ps[i].ExecutionID); s.Phase != "terminal" || s.Public != "completed" {
				t.Fatalf("item %d after complete: %+v", i, s)
			}
			if ev := leaseEvents(t, c, ps[i].ExecutionID); ev != "acquired:ns,revoked:ns" {
				t.Fatalf("item %d lease events %q", i, ev)
			}
		}
		if !errors.Is(errs[2], postgres.CodeStaleLease) {
			t.Fatalf("stale fence: %v", errs[2])
		}
		if s := core(t, c, ls[2].ExecutionID); s.Phase != "active" || s.Ownership != "leased" {
			t.Fatalf("stale-fenced execution changed: %+v", s)
		}
		if !errors.Is(errs[3], postgres.CodeExecutionNotFound) {
			t.Fatalf("unknown execution: %v", errs[3])
		}
		var res []byte
		c.Pool().QueryRow(ctx, `SELECT result FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2::uuid`,
			int16(ls[0].ExecutionID.Partition().Index), ls[0].ExecutionID.UUIDString()).Scan(&res)
		if string(res) != "r0" {
			t.Fatalf("result %q", res)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = ANY($1::uuid[])`,
			[]string{ls[0].ExecutionID.UUIDString(), ls[1].ExecutionID.UUIDString(), ls[2].ExecutionID.UUIDString(), ls[3].ExecutionID.UUIDString()}); n != 3 {
			t.Fatalf("%d completion events, want 3", n)
		}
		// The good fence of the stale item still completes it; a repeat
		// of a completed one is refused as a lone call would be.
		errs = c.CompleteBatchForTest(ctx, []*postgres.CompleteExecutionParams{
			{ExecutionID: ls[2].ExecutionID, Fence: ls[2].Fence()},
			{ExecutionID: ls[0].ExecutionID, Fence: ls[0].Fence()},
		})
		if errs[0] != nil || !errors.Is(errs[1], postgres.CodeExecutionNotActive) {
			t.Fatalf("second batch: %v", errs)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		const n = 24
		for range n {
			newExec(t, c, &execOpts{lane: "group-conc"})
		}
		ls, err := c.ClaimForWorkerN(ctx, &postgres.ClaimForWorkerParams{LaneID: "group-conc", WorkerID: "w",
			WorkerInstanceID: "wi", LeaseTTLMs: 30_000}, n)
		if err != nil || len(ls) != n {
			t.Fatalf("claim: %d, %v", len(ls), err)
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, l := range ls {
			f := l.Fence()
			if i%6 == 5 {
				f.LeaseEpoch++ // stale
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.CompleteExecution(ctx, &postgres.CompleteExecutionParams{ExecutionID: l.ExecutionID, Fence: f})
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if stale := i%6 == 5; stale != errors.Is(err, postgres.CodeStaleLease) || (!stale && err != nil) {
				t.Fatalf("item %d (stale %v): %v", i, stale, err)
			}
			want := "terminal"
			if i%6 == 5 {
				want = "active"
			}
			if s := core(t, c, ls[i].ExecutionID); s.Phase != want {
				t.Fatalf("item %d: phase %s, want %s", i, s.Phase, want)
			}
		}
	})
}

// An execution becoming eligible on a subscribed lane wakes the
// subscriber (NOTIFY fabric_eligible from the ff_exec_core trigger).
func TestSubscribeEligible(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	sub, err := c.SubscribeEligible(ctx, []string{"wake-me"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	newExec(t, c, &execOpts{lane: "wake-me"})
	select {
	case <-sub.C:
	case <-ctx.Done():
		t.Fatal("no wake for an eligible execution on the lane")
	}
	// A delayed execution is not eligible: it wakes nobody until it is
	// promoted; the promotion does.
	id := newExec(t, c, &execOpts{lane: "wake-me", delayUntil: time.Now().Add(time.Hour).UnixMilli()})
	if _, err := c.Pool().Exec(ctx, `UPDATE ff_exec_core SET eligibility_state = 'eligible_now'
 WHERE partition_key = $1 AND execution_id = $2::uuid`, int16(id.Partition().Index), id.UUIDString()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C:
	case <-ctx.Done():
		t.Fatal("no wake for a promoted execution")
	}
}

// A flow member lives on its flow's partition, not its lane's: the
// notification names that partition, and the next Claim claims it there
// — not only the periodic full scan (every eighth call).
func TestClaimerClaimsNotifiedFlowMember(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	const lane = "flow-lane"
	flow := model.NewUUID()
	for parts.FlowPartition(flow) == parts.SoloPartition(lane) {
		flow = model.NewUUID()
	}
	cl, err := postgres.NewDriver(c).NewClaimer(ctx, &backend.ClaimerConfig{WorkerID: "w", WorkerInstanceID: "wi",
		Lanes: []string{lane}, LeaseTTLMs: 30_000, Notifications: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Claim once with nothing to claim: the flow member below is found by
	// its notification (or the claimer's background scan), not by Claim
	// looking at every partition.
	if got, err := cl.Claim(ctx, 1); err != nil || len(got) != 0 {
		t.Fatalf("empty lane: %d claimed, %v", len(got), err)
	}
	id := newExec(t, c, &execOpts{lane: lane, flow: flow})
	select {
	case <-cl.Wake():
	case <-ctx.Done():
		t.Fatal("no wake for the flow member")
	}
	got, err := cl.Claim(ctx, 2)
	if err != nil || len(got) != 1 || got[0].ExecutionID != id {
		t.Fatalf("claim after the wake: %+v, %v; want %s", got, err, id)
	}
	// A payload from the trigger before partitions were named is a lane alone.
	if p, l := postgres.ParseEligibleForTest("flow-lane"); p != -1 || l != "flow-lane" {
		t.Fatalf("lane-only payload: %d %q", p, l)
	}
	if p, l := postgres.ParseEligibleForTest("17:a:b"); p != 17 || l != "a:b" {
		t.Fatalf("payload 17:a:b: %d %q", p, l)
	}
	if p, l := postgres.ParseEligibleForTest("x9:a"); p != -1 || l != "x9:a" {
		t.Fatalf("payload x9:a: %d %q", p, l)
	}
}

// A crash of the server discards its statistics, by which the claimer's
// scan skips the partitions never used: a flow member eligible on its
// flow's partition whose every row predates the crash (here: the
// statistics reset, as a crash does), and whose notification was lost,
// is still claimed — by the scan's periodic sweep of every partition.
func TestClaimerFindsWorkTheStatisticsForgot(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, 2*time.Minute)
	const lane = "forgotten-lane"
	flow := model.NewUUID()
	for parts.FlowPartition(flow) == parts.SoloPartition(lane) {
		flow = model.NewUUID()
	}
	id := newExec(t, c, &execOpts{lane: lane, flow: flow})
	var child string
	if err := c.Pool().QueryRow(ctx, `SELECT tableoid::regclass::text FROM ff_exec_core WHERE execution_id = $1::uuid`,
		id.UUIDString()).Scan(&child); err != nil {
		t.Fatal(err)
	}
	stat := func() (n int64) {
		if err := c.Pool().QueryRow(ctx, `SELECT pg_stat_get_live_tuples($1::regclass) + pg_stat_get_tuples_inserted($1::regclass)
  + pg_stat_get_tuples_updated($1::regclass)`, child).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The insert's statistics reach the collector within a second or so;
	// then they are reset, as a crash resets them.
	pgtest.Eventually(t, time.Minute, "the insert counted by the statistics", func() bool { return stat() > 0 })
	if _, err := c.Pool().Exec(ctx, `SELECT pg_stat_reset()`); err != nil {
		t.Fatal(err)
	}
	if n := stat(); n != 0 {
		t.Fatalf("statistics of %s after the reset: %d", child, n)
	}
	cl, err := postgres.NewDriverFullSweepForTest(c, 3).NewClaimer(ctx, &backend.ClaimerConfig{WorkerID: "w", WorkerInstanceID: "wi",
		Lanes: []string{lane}, LeaseTTLMs: 30_000})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Without notifications a worker polls: Claim claims what the scan found.
	var got []*backend.ClaimResult
	pgtest.Eventually(t, time.Minute, "the claimer's scan finds the flow member on "+child, func() bool {
		if got, err = cl.Claim(ctx, 1); err != nil {
			t.Fatal(err)
		}
		return len(got) > 0
	})
	if got[0].ExecutionID != id {
		t.Fatalf("claimed %s, want %s", got[0].ExecutionID, id)
	}
}
