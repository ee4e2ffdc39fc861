package backendtest

import (
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// crashTTL is the lease lifetime of a worker the reclaim subtests let
// crash: short, so its leases run out within the test.
const crashTTL = int64(200)

// runReclaim registers the crash-recovery subtests; the attempt-timeout
// one needs opts.SweepAttemptTimeouts.
func runReclaim(sub func(string, func(*env)), opts Options) {
	sub("Reclaim/CrashMidLease", testReclaimCrash)
	sub("Reclaim/Cap", testReclaimCap)
	sub("AttemptTimeout/OnDeadlineOnly", func(e *env) { testAttemptTimeoutDeadline(e, opts) })
}

// worker opens a claim session of its own instance on the env's lane
// with lease lifetime ttlMs, closed with the test.
func (e *env) worker(name string, ttlMs int64) backend.Claimer {
	e.t.Helper()
	c, err := e.d.NewClaimer(e.ctx, &backend.ClaimerConfig{WorkerID: "bt-" + name, WorkerInstanceID: "bt-" + name + "-" + e.lane,
		Lanes: []string{e.lane}, LeaseTTLMs: ttlMs, Concurrency: 4})
	if err != nil {
		e.t.Fatalf("new claimer %s: %v", name, err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// claimWithin calls c.Claim until it claimed want executions or the
// deadline passed (a reclaim waits for the crashed lease to run out and
// for the session's next reclaim pass, once a second on both backends).
func (e *env) claimWithin(c backend.Claimer, want int, d time.Duration) []*backend.ClaimResult {
	e.t.Helper()
	var got []*backend.ClaimResult
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(got) < want && time.Now().Before(deadline) {
		rs, err := c.Claim(e.ctx, want-len(got))
		if err != nil {
			e.t.Fatalf("claim: %v", err)
		}
		got = append(got, rs...)
		if len(got) < want {
			select {
			case <-tick.C:
			case <-e.ctx.Done():
				e.t.Fatalf("claim: %v", e.ctx.Err())
			}
		}
	}
	return got
}

// crash claims the env's one execution with a worker whose lease then
// runs out unrenewed (the worker crashed).
func (e *env) crash(name string) *backend.ClaimResult {
	e.t.Helper()
	rs := e.claimWithin(e.worker(name, crashTTL), 1, 20*time.Second)
	if len(rs) != 1 {
		e.t.Fatalf("worker %s claimed nothing", name)
	}
	return rs[0]
}

// testReclaimCrash: a worker crashes mid-lease; another worker's claim
// session, with no host running any scanner, takes the execution over
// once the lease ran out, as a new attempt of type "reclaim" (index and
// lease epoch one up, the reclaim counted). The crashed worker's fence is
// dead; the new one completes.
func testReclaimCrash(e *env) {
	id := e.create(e.spec())
	a := e.crash("a")
	if a.ExecutionID != id || a.AttemptType != "initial" || a.Fence.AttemptIndex != 0 {
		e.t.Fatalf("crashed worker's claim: %+v", a)
	}
	rs := e.claimWithin(e.worker("b", ttl), 1, 20*time.Second)
	if len(rs) != 1 {
		e.t.Fatalf("the expired lease was not reclaimed within 20 s: %+v", e.state(id))
	}
	b := rs[0]
	if b.ExecutionID != id || b.AttemptType != "reclaim" || b.Fence.AttemptIndex != 1 ||
		b.Fence.LeaseEpoch <= a.Fence.LeaseEpoch || b.LaneID != e.lane || string(b.Payload) != "in" || b.Kind != "conformance" {
		e.t.Fatalf("reclaim: %+v (crashed claim %+v), want attempt 1 of type reclaim", b, a)
	}
	s := e.state(id)
	wantState(e.t, s, model.PhaseActive, model.PublicActive)
	if s.OwnershipState != model.OwnershipLeased || s.AttemptIndex != 1 || s.AttemptCount != 2 ||
		s.LeaseEpoch != b.Fence.LeaseEpoch || s.Fields["lease_reclaim_count"] != "1" {
		e.t.Fatalf("state after reclaim: %+v", s)
	}
	err := e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: id, Fence: a.Fence})
	wantErr(e.t, "complete with the crashed worker's fence", err, backend.ErrLeaseGone)
	_, err = e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: id, Fence: a.Fence, LeaseTTLMs: ttl})
	wantErr(e.t, "renew with the crashed worker's fence", err, backend.ErrLeaseGone)
	e.complete(b, []byte("out"))
	s = e.state(id)
	wantState(e.t, s, model.PhaseTerminal, model.PublicCompleted)
	if s.AttemptCount != 2 {
		e.t.Fatalf("state after completion: %+v", s)
	}
}

// testReclaimCap: past its policy's max_reclaim_count an expired lease
// is not reclaimed: the execution fails terminally
// (max_reclaims_exceeded).
func testReclaimCap(e *env) {
	p := e.spec()
	p.PolicyJSON = `{"max_reclaim_count":1}`
	id := e.create(p)
	e.crash("a")
	rs := e.claimWithin(e.worker("b", crashTTL), 1, 20*time.Second)
	if len(rs) != 1 || rs[0].AttemptType != "reclaim" || rs[0].Fence.AttemptIndex != 1 {
		e.t.Fatalf("first reclaim: %+v", rs)
	}
	// b crashes too: a third worker's reclaim pass meets the cap.
	c := e.worker("c", ttl)
	deadline := time.Now().Add(20 * time.Second)
	for e.state(id).LifecyclePhase != model.PhaseTerminal {
		if rs := e.claimWithin(c, 1, 200*time.Millisecond); len(rs) != 0 {
			e.t.Fatalf("reclaimed past the cap: %+v", rs[0])
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("not failed past the reclaim cap within 20 s: %+v", e.state(id))
		}
	}
	s := e.state(id)
	wantState(e.t, s, model.PhaseTerminal, model.PublicFailed)
	if s.FailureReason != "max_reclaims_exceeded" && s.Fields["failure_reason"] != "max_reclaims_exceeded" {
		e.t.Fatalf("failure reason: %+v", s)
	}
}

// testAttemptTimeoutDeadline: the attempt-timeout scanner expires an
// attempt on its own deadline (policy.timeout_policy.attempt_timeout_ms
// from the claim) only: a lease that ran out is no timeout (the
// execution is reclaimed), an attempt without a timeout never times out,
// and a reclaim keeps the deadline of the attempt it took over.
func testAttemptTimeoutDeadline(e *env, opts Options) {
	if opts.SweepAttemptTimeouts == nil {
		e.t.Fatal("the driver's test gave no Options.SweepAttemptTimeouts: the attempt-timeout contract is part of the suite")
	}
	const timeout = int64(600_000)
	p := e.spec()
	p.PolicyJSON = `{"timeout_policy":{"attempt_timeout_ms":600000}}`
	timed := e.create(p)
	plain := e.create(e.spec())
	claimedAt := time.Now().UnixMilli()
	crashed := e.claimWithin(e.worker("a", crashTTL), 2, 20*time.Second)
	if len(crashed) != 2 {
		e.t.Fatalf("claimed %d of 2", len(crashed))
	}
	sweep := func(id model.ExecutionID, now int64) {
		e.t.Helper()
		if err := opts.SweepAttemptTimeouts(e.ctx, e.d, id, now); err != nil {
			e.t.Fatalf("attempt-timeout sweep at %d: %v", now, err)
		}
	}
	// Both leases run out unrenewed: past their expiry, before the
	// attempt's deadline, nothing times out.
	for _, c := range crashed {
		sweep(c.ExecutionID, c.ExpiresAt+5_000)
		if s := e.state(c.ExecutionID); s.LifecyclePhase != model.PhaseActive {
			e.t.Fatalf("%s timed out on its lease's expiry: %+v", c.ExecutionID, s)
		}
	}
	rs := e.claimWithin(e.worker("b", ttl), 2, 20*time.Second)
	if len(rs) != 2 {
		e.t.Fatalf("reclaimed %d of 2", len(rs))
	}
	for _, r := range rs {
		if r.AttemptType != "reclaim" || r.Fence.AttemptIndex != 1 {
			e.t.Fatalf("reclaim: %+v", r)
		}
	}
	// Before the deadline: nothing; past it, the timed attempt expires
	// (no retry policy) and the other one stays.
	sweep(timed, claimedAt+timeout-5_000)
	if s := e.state(timed); s.LifecyclePhase != model.PhaseActive {
		e.t.Fatalf("timed out before its deadline: %+v", s)
	}
	late := time.Now().UnixMilli() + timeout + 5_000
	sweep(timed, late)
	sweep(plain, late)
	s := e.state(timed)
	wantState(e.t, s, model.PhaseTerminal, model.PublicExpired)
	if s := e.state(plain); s.LifecyclePhase != model.PhaseActive || s.AttemptIndex != 1 {
		e.t.Fatalf("an attempt without a timeout timed out: %+v", s)
	}
}
