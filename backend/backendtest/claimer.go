package backendtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// claimerUnmigrated are the claim session's operations for RunUnmigrated
// (opening the session itself reads nothing on a backend without
// notifications).
func claimerUnmigrated(ctx context.Context, t *testing.T, d backend.Driver, id model.ExecutionID, f backend.Fence) map[string]func() error {
	var c backend.Claimer
	open := func() error {
		if c != nil {
			return nil
		}
		var err error
		c, err = d.NewClaimer(ctx, &backend.ClaimerConfig{WorkerID: "w", WorkerInstanceID: "wi", Lanes: []string{"bt-unmigrated"},
			LeaseTTLMs: ttl})
		if err == nil {
			t.Cleanup(c.Close)
		}
		return err
	}
	return map[string]func() error{
		"Claimer.Claim": func() error {
			if err := open(); err != nil {
				return err
			}
			_, err := c.Claim(ctx, 1)
			return err
		},
		"Claimer.CompleteAndClaim": func() error {
			if err := open(); err != nil {
				return err
			}
			_, err, _ := c.CompleteAndClaim(ctx, &backend.CompleteExecutionParams{ExecutionID: id, Fence: f,
				Holder: backend.Holder{LaneID: "bt-unmigrated", WorkerInstanceID: "wi"}}, 1)
			return err
		},
		"Claimer.ClaimExecution": func() error {
			if err := open(); err != nil {
				return err
			}
			_, err := c.ClaimExecution(ctx, id, "bt-unmigrated")
			return err
		},
	}
}

func runClaimer(sub func(string, func(*env))) {
	sub("Claimer/Claim", testClaimerClaim)
	sub("Claimer/CompleteAndClaim", testClaimerCompleteAndClaim)
	sub("Claimer/ClaimExecution", testClaimerClaimByID)
	sub("Claimer/Wake", testClaimerWake)
	sub("Claimer/InvalidConfig", testClaimerInvalid)
	sub("LaneSpread", testLaneSpread)
}

// claimer opens a claim session on the env's lane, closed with the test.
func (e *env) claimer(notify bool, caps ...string) backend.Claimer {
	e.t.Helper()
	c, err := e.d.NewClaimer(e.ctx, &backend.ClaimerConfig{WorkerID: "bt-worker", WorkerInstanceID: "bt-" + e.lane,
		Lanes: []string{e.lane}, Capabilities: caps, LeaseTTLMs: ttl, Concurrency: 4, Notifications: notify})
	if err != nil {
		e.t.Fatalf("new claimer: %v", err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// claimAll claims from c until want executions are claimed or a whole
// sweep of empty claims (SweepRounds) found nothing more.
func (e *env) claimAll(c backend.Claimer, want int) []*backend.ClaimResult {
	e.t.Helper()
	var got []*backend.ClaimResult
	for empty := 0; len(got) < want && empty < c.SweepRounds(); {
		rs, err := c.Claim(e.ctx, want-len(got))
		if err != nil {
			e.t.Fatalf("claim: %v", err)
		}
		if len(rs) > want-len(got) {
			e.t.Fatalf("claim of %d returned %d", want-len(got), len(rs))
		}
		if len(rs) == 0 {
			empty++
		}
		got = append(got, rs...)
	}
	return got
}

func testClaimerClaim(e *env) {
	c := e.claimer(false)
	if rs := e.claimAll(c, 1); len(rs) != 0 {
		e.t.Fatalf("claimed %+v on an empty lane", rs[0])
	}
	p := e.spec()
	p.Namespace = "ns-" + e.lane
	ids := []model.ExecutionID{e.create(p), e.create(e.spec()), e.create(e.spec())}
	before := time.Now().UnixMilli()
	rs := e.claimAll(c, 3)
	if len(rs) != 3 {
		e.t.Fatalf("claimed %d of 3", len(rs))
	}
	var got []model.ExecutionID
	for _, r := range rs {
		got = append(got, r.ExecutionID)
		if r.LaneID != e.lane || r.Kind != "conformance" || string(r.Payload) != "in" || r.AttemptType != "initial" ||
			r.Fence.LeaseEpoch < 1 || r.Fence.AttemptIndex != 0 || r.ExpiresAt < before+ttl/2 {
			e.t.Fatalf("claim: %+v", r)
		}
		if r.ExecutionID == ids[0] && r.Namespace != p.Namespace {
			e.t.Fatalf("claim of %s: namespace %q, want %q", r.ExecutionID, r.Namespace, p.Namespace)
		}
		s := e.state(r.ExecutionID)
		wantState(e.t, s, model.PhaseActive, model.PublicActive)
		if s.LeaseEpoch != r.Fence.LeaseEpoch {
			e.t.Fatalf("state after claim: %+v, fence %+v", s, r.Fence)
		}
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		e.t.Fatalf("claimed %v, want %v", got, ids)
	}
	if more := e.claimAll(c, 1); len(more) != 0 {
		e.t.Fatalf("claimed %s twice", more[0].ExecutionID)
	}
	// Capabilities: a session without gpu leaves the execution alone, one
	// with it claims it.
	gp := e.spec()
	gp.PolicyJSON = `{"routing_requirements":{"required_capabilities":["gpu"]}}`
	gid := e.create(gp)
	if rs := e.claimAll(c, 1); len(rs) != 0 {
		e.t.Fatalf("a session without gpu claimed %s", rs[0].ExecutionID)
	}
	// It stays runnable (Valkey parks it in blocked:route for a capable
	// worker; Postgres leaves it eligible).
	if s := e.state(gid); s.LifecyclePhase != model.PhaseRunnable {
		e.t.Fatalf("the gpu execution after a refused claim: %+v", s)
	}
}

func testClaimerCompleteAndClaim(e *env) {
	c := e.claimer(false)
	first := e.create(e.spec())
	nextMilli()
	second := e.create(e.spec())
	rs := e.claimAll(c, 1)
	if len(rs) != 1 || rs[0].ExecutionID != first {
		e.t.Fatalf("first claim: %d results, want %s", len(rs), first)
	}
	done := rs[0]
	params := &backend.CompleteExecutionParams{ExecutionID: done.ExecutionID, Fence: done.Fence,
		Holder: backend.Holder{LaneID: done.LaneID, WorkerInstanceID: "bt-" + e.lane}, Result: []byte("out")}
	next, completeErr, claimErr := c.CompleteAndClaim(e.ctx, params, 1)
	if completeErr != nil || claimErr != nil {
		e.t.Fatalf("complete and claim: complete %v, claim %v", completeErr, claimErr)
	}
	wantState(e.t, e.state(first), model.PhaseTerminal, model.PublicCompleted)
	if b, err := e.d.ExecutionResult(e.ctx, first); err != nil || string(b) != "out" {
		e.t.Fatalf("result %q %v, want out", b, err)
	}
	if len(next) > 1 {
		e.t.Fatalf("complete and claim of 1 returned %d", len(next))
	}
	if len(next) == 0 {
		if !c.FreesSlotBeforeEnd() {
			e.t.Fatal("complete and claim claimed nothing with an eligible execution on the lane")
		}
		next = e.claimAll(c, 1)
	}
	if len(next) != 1 || next[0].ExecutionID != second {
		e.t.Fatalf("next claim: %d results, want %s", len(next), second)
	}
	// The completed lease is gone: completing it again is refused, and
	// the claim beside it still works (nothing left to claim).
	again, completeErr, claimErr := c.CompleteAndClaim(e.ctx, params, 1)
	if !errors.Is(completeErr, backend.ErrLeaseGone) {
		e.t.Fatalf("completing a completed lease again: %v, want ErrLeaseGone", completeErr)
	}
	if claimErr != nil || len(again) != 0 {
		e.t.Fatalf("claim beside a refused completion: %d claimed, %v", len(again), claimErr)
	}
	wantState(e.t, e.state(second), model.PhaseActive, model.PublicActive)
}

func testClaimerClaimByID(e *env) {
	c := e.claimer(false)
	first := e.create(e.spec())
	second := e.create(e.spec())
	r, err := c.ClaimExecution(e.ctx, second, e.lane)
	if err != nil || r == nil {
		e.t.Fatalf("claim by id: %+v %v", r, err)
	}
	if r.ExecutionID != second || r.LaneID != e.lane || string(r.Payload) != "in" || r.AttemptType != "initial" ||
		r.Fence.LeaseEpoch < 1 {
		e.t.Fatalf("claim by id: %+v", r)
	}
	r, err = c.ClaimExecution(e.ctx, second, e.lane)
	if r != nil || (err != nil && !errors.Is(err, backend.ErrNotClaimable)) {
		e.t.Fatalf("claim a leased execution by id: %+v %v, want nothing or ErrNotClaimable", r, err)
	}
	gp := e.spec()
	gp.PolicyJSON = `{"routing_requirements":{"required_capabilities":["gpu"]}}`
	gid := e.create(gp)
	r, err = c.ClaimExecution(e.ctx, gid, e.lane)
	if r != nil || (err != nil && !errors.Is(err, backend.ErrCapabilityMismatch) && !errors.Is(err, backend.ErrNotClaimable)) {
		e.t.Fatalf("claim by id without the capability: %+v %v", r, err)
	}
	_, err = c.ClaimExecution(e.ctx, "not-an-id", e.lane)
	wantErr(e.t, "claim a malformed id", err, backend.ErrInvalidInput)
	if rs := e.claimAll(c, 1); len(rs) != 1 || rs[0].ExecutionID != first {
		e.t.Fatalf("claim after claim by id: %d results, want %s", len(rs), first)
	}
}

func testClaimerWake(e *env) {
	if c := e.claimer(false); c.Wake() != nil {
		e.t.Fatal("a session without notifications has a Wake channel")
	}
	c := e.claimer(true)
	wake := c.Wake()
	if wake == nil {
		e.t.Fatal("a session with notifications has no Wake channel")
	}
	// The subscription comes up in the background: create until a wake
	// arrives.
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.create(e.spec())
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-wake:
			t.Stop()
			if rs := e.claimAll(c, 1); len(rs) != 1 {
				e.t.Fatal("woken, but nothing to claim")
			}
			return
		case <-t.C:
		}
		if time.Now().After(deadline) {
			e.t.Fatal("no wake within 30s of creating eligible executions")
		}
	}
}

func testClaimerInvalid(e *env) {
	_, err := e.d.NewClaimer(e.ctx, &backend.ClaimerConfig{WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: ttl})
	wantErr(e.t, "a claimer without lanes", err, backend.ErrInvalidInput)
	_, err = e.d.NewClaimer(e.ctx, &backend.ClaimerConfig{WorkerID: "w", WorkerInstanceID: "wi", Lanes: []string{e.lane}})
	wantErr(e.t, "a claimer without a lease TTL", err, backend.ErrInvalidInput)
}

func testLaneSpread(e *env) {
	s, err := e.d.LaneSpread(e.ctx, e.lane)
	if err != nil || s != (model.LaneSpread{}) {
		e.t.Fatalf("spread of a new lane: %+v %v, want the default", s, err)
	}
	want := model.LaneSpread{Spread: true, K: 4}
	err = e.d.SetLaneSpread(e.ctx, e.lane, want)
	if errors.Is(err, backend.ErrUnsupported) {
		return
	}
	if err != nil {
		e.t.Fatalf("set lane spread: %v", err)
	}
	if s, err = e.d.LaneSpread(e.ctx, e.lane); err != nil || s != want {
		e.t.Fatalf("spread after set: %+v %v, want %+v", s, err, want)
	}
}
