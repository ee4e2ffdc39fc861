// Package backendtest is the conformance suite of backend.Driver: RunWith
// runs every operation of the interface against a driver on a real
// server and asserts the behaviour both backends must share. Each driver
// package calls it from a test:
//
//	func TestDriverConformance(t *testing.T) {
//		backendtest.RunWith(t, func(t *testing.T) backend.Driver { return valkey.NewDriver(valkeytest.Client(t)) }, opts)
//	}
//
// Subtests run in parallel on one driver (newDriver is called once per
// RunWith); each works on lanes and flows of its own, so they never see each
// other's executions.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Operations names every operation of backend.Driver the suite
// exercises, for reports (operations × backends).
var Operations = []string{"CreateExecution", "CreateExecutions", "ClaimNext", "ClaimExecution", "RenewLease",
	"CompleteExecution", "FailExecution", "DelayExecution", "CancelExecution", "ExecutionState", "ExecutionResult",
	"SubscribeCompletions", "WatchTerminal", "Claimer.Claim", "Claimer.CompleteAndClaim", "Claimer.ClaimExecution"}

const ttl = int64(30_000)

// env is one subtest's view of the driver.
type env struct {
	t    *testing.T
	d    backend.Driver
	ctx  context.Context
	lane string
}

func newEnv(t *testing.T, d backend.Driver) *env {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &env{t: t, d: d, ctx: ctx, lane: "bt-" + model.NewUUID().String()[:8]}
}

// spec is a create on the env's lane, minted on its solo partition.
func (e *env) spec() *backend.CreateExecutionParams {
	return &backend.CreateExecutionParams{ExecutionID: e.d.Partitions().NewSoloExecutionID(e.lane),
		Namespace: "bt", LaneID: e.lane, ExecutionKind: "conformance", CreatorIdentity: "backendtest",
		Payload: []byte("in")}
}

func (e *env) create(p *backend.CreateExecutionParams) model.ExecutionID {
	e.t.Helper()
	r, err := e.d.CreateExecution(e.ctx, p)
	if err != nil {
		e.t.Fatalf("create %s: %v", p.ExecutionID, err)
	}
	if r.Duplicate {
		e.t.Fatalf("create %s: unexpected duplicate", p.ExecutionID)
	}
	return r.ExecutionID
}

func (e *env) claimNext(caps ...string) *backend.ClaimResult {
	e.t.Helper()
	r, err := e.d.ClaimNext(e.ctx, &backend.ClaimNextParams{LaneID: e.lane, WorkerID: "bt-worker",
		WorkerInstanceID: "bt-worker-1", Capabilities: caps, LeaseTTLMs: ttl})
	if err != nil {
		e.t.Fatalf("claim next on %s: %v", e.lane, err)
	}
	return r
}

func (e *env) mustClaim() *backend.ClaimResult {
	e.t.Helper()
	r := e.claimNext()
	if r == nil {
		e.t.Fatalf("claim next on %s: nothing claimed", e.lane)
	}
	return r
}

func (e *env) state(id model.ExecutionID) *backend.ExecutionState {
	e.t.Helper()
	s, err := e.d.ExecutionState(e.ctx, id)
	if err != nil {
		e.t.Fatalf("state %s: %v", id, err)
	}
	return s
}

func (e *env) complete(c *backend.ClaimResult, result []byte) {
	e.t.Helper()
	if err := e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: c.ExecutionID,
		Fence: c.Fence, Result: result}); err != nil {
		e.t.Fatalf("complete %s: %v", c.ExecutionID, err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want one matching %v", what, err, want)
	}
}

func wantState(t *testing.T, s *backend.ExecutionState, phase, public string) {
	t.Helper()
	if s.LifecyclePhase != phase || s.PublicState != public {
		t.Fatalf("state of %s: phase %q public %q, want %q %q (fields %v)", s.ID, s.LifecyclePhase, s.PublicState,
			phase, public, s.Fields)
	}
}

// Options are what a driver's test gives the suite beyond the driver:
// stand-ins for the host's scanners, which the Driver contract does not
// run. Every field is required: a subtest needing one that is nil fails
// (a conformance case skipped proves nothing).
type Options struct {
	// SweepAttemptTimeouts runs the backend's attempt-timeout scanner
	// once, as of nowMs, over what holds execution id (its partition, or
	// the execution alone): every attempt whose own deadline passed by
	// nowMs times out as the host's scanner would time it out.
	SweepAttemptTimeouts func(ctx context.Context, d backend.Driver, id model.ExecutionID, nowMs int64) error
	// PromoteDelayed runs the backend's delayed promoter once, as of
	// nowMs, over what holds execution id: a delayed execution due by
	// nowMs becomes eligible, as the host's scanner would promote it.
	PromoteDelayed func(ctx context.Context, d backend.Driver, id model.ExecutionID, nowMs int64) error
}

// RunWith runs the conformance suite on the driver newDriver returns
// (called once; the subtests share it, on lanes of their own), with the
// driver test's Options.
func RunWith(t *testing.T, newDriver func(t *testing.T) backend.Driver, opts Options) {
	d := newDriver(t)
	if d.Name() == "" {
		t.Fatal("Name is empty")
	}
	if d.Partitions().Flow == 0 {
		t.Fatal("Partitions().Flow is 0")
	}
	sub := func(name string, fn func(e *env)) {
		t.Run(name, func(t *testing.T) { fn(newEnv(t, d)) })
	}
	sub("CreateExecution/Waiting", testCreateWaiting)
	sub("CreateExecution/Delayed", testCreateDelayed)
	sub("CreateExecution/DuplicateID", testCreateDuplicateID)
	sub("CreateExecution/IdempotencyKey", testCreateIdempotencyKey)
	sub("CreateExecution/InvalidInput", testCreateInvalid)
	sub("CreateExecutions", testCreateMany)
	runBadInput(sub)
	sub("ClaimNext/Empty", testClaimNextEmpty)
	sub("ClaimNext/Job", testClaimNextJob)
	sub("ClaimNext/PriorityThenAge", testClaimNextOrder)
	sub("ClaimNext/Capabilities", testClaimNextCapabilities)
	sub("ClaimNext/FlowMember", testClaimNextFlowMember)
	sub("ClaimNext/Partitions", testClaimNextPartitions)
	sub("ClaimNext/Concurrent", testClaimNextConcurrent)
	sub("ClaimExecution", testClaimByID)
	sub("RenewLease", testRenew)
	sub("IsTransient", testErrorClasses)
	sub("CompleteExecution", testComplete)
	sub("CompleteExecution/Holder", testCompleteHolder)
	sub("FailExecution/Terminal", testFailTerminal)
	sub("FailExecution/Retry", testFailRetry)
	sub("DelayExecution", testDelay)
	sub("CancelExecution", testCancel)
	sub("CancelExecution/Leased", testCancelLeased)
	sub("ExecutionState+Result/NotFound", testNotFound)
	sub("SubscribeCompletions", testCompletions)
	sub("WatchTerminal", testWatchTerminal)
	runControl(sub)
	runBudget(sub)
	runPeriodic(sub)
	runFlows(sub)
	runAttemptReads(sub)
	runWorkers(sub)
	runClaimer(sub)
	runReclaim(sub, opts)
	runInspector(sub, opts)
}

func testCreateWaiting(e *env) {
	p := e.spec()
	p.Priority = 3
	r, err := e.d.CreateExecution(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.Duplicate || r.ExecutionID != p.ExecutionID || r.PublicState != model.PublicWaiting {
		e.t.Fatalf("create: %+v, want %s waiting", r, p.ExecutionID)
	}
	s := e.state(p.ExecutionID)
	wantState(e.t, s, model.PhaseRunnable, model.PublicWaiting)
	if s.EligibilityState != model.EligibleNow || s.LaneID != e.lane || s.Kind != "conformance" ||
		s.Namespace != "bt" || s.Priority != 3 || s.AttemptCount != 0 || s.FlowID != "" {
		e.t.Fatalf("state: %+v", s)
	}
	if b, err := e.d.ExecutionResult(e.ctx, p.ExecutionID); err != nil || b != nil {
		e.t.Fatalf("result of a waiting execution: %q %v, want nil", b, err)
	}
}

func testCreateDelayed(e *env) {
	p := e.spec()
	p.DelayUntil = time.Now().Add(time.Hour).UnixMilli()
	r, err := e.d.CreateExecution(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.PublicState != model.PublicDelayed {
		e.t.Fatalf("create delayed: public state %q", r.PublicState)
	}
	s := e.state(p.ExecutionID)
	wantState(e.t, s, model.PhaseRunnable, model.PublicDelayed)
	if s.EligibilityState != model.EligibleNotUntilTime {
		e.t.Fatalf("eligibility %q", s.EligibilityState)
	}
	if c := e.claimNext(); c != nil {
		e.t.Fatalf("claimed a delayed execution: %+v", c)
	}
	_, err = e.d.ClaimExecution(e.ctx, &backend.ClaimExecutionParams{ExecutionID: p.ExecutionID, WorkerID: "w",
		WorkerInstanceID: "wi", LeaseTTLMs: ttl})
	wantErr(e.t, "claim a delayed execution by id", err, backend.ErrNotClaimable)
}

func testCreateDuplicateID(e *env) {
	p := e.spec()
	e.create(p)
	// The same id and payload again (a retry): a duplicate.
	r, err := e.d.CreateExecution(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if !r.Duplicate || r.ExecutionID != p.ExecutionID {
		e.t.Fatalf("second create: %+v, want a duplicate of %s", r, p.ExecutionID)
	}
	// The same id with another payload: a conflict, nothing changed.
	q := *p
	q.Payload = []byte("other")
	_, err = e.d.CreateExecution(e.ctx, &q)
	wantErr(e.t, "the id again with another payload", err, backend.ErrConflict)
	q.Payload = nil
	_, err = e.d.CreateExecution(e.ctx, &q)
	wantErr(e.t, "the id again without its payload", err, backend.ErrConflict)
	if c := e.mustClaim(); string(c.Payload) != "in" {
		e.t.Fatalf("the duplicate overwrote the payload: %q", c.Payload)
	}
}

func testCreateIdempotencyKey(e *env) {
	p := e.spec()
	p.IdempotencyKey = "key-" + e.lane
	first, err := e.d.CreateExecution(e.ctx, p)
	if err != nil || first.Duplicate {
		e.t.Fatalf("first create: %+v %v", first, err)
	}
	q := e.spec() // another id, the same key
	q.IdempotencyKey = p.IdempotencyKey
	again, err := e.d.CreateExecution(e.ctx, q)
	if err != nil {
		e.t.Fatal(err)
	}
	if !again.Duplicate || again.ExecutionID != first.ExecutionID {
		e.t.Fatalf("repeat with the key: %+v, want a duplicate of %s", again, first.ExecutionID)
	}
	e.state(first.ExecutionID)
	if c := e.mustClaim(); c.ExecutionID != first.ExecutionID {
		e.t.Fatalf("claimed %s, want %s", c.ExecutionID, first.ExecutionID)
	}
	if c := e.claimNext(); c != nil {
		e.t.Fatalf("a second execution exists: %s", c.ExecutionID)
	}
}

func testCreateInvalid(e *env) {
	p := e.spec()
	p.LaneID = ""
	_, err := e.d.CreateExecution(e.ctx, p)
	wantErr(e.t, "create with an empty lane", err, backend.ErrInvalidInput)
	p = e.spec()
	p.PolicyJSON = "{not json"
	_, err = e.d.CreateExecution(e.ctx, p)
	wantErr(e.t, "create with a policy that is not JSON", err, backend.ErrInvalidInput)
	_, err = e.d.ExecutionState(e.ctx, p.ExecutionID)
	wantErr(e.t, "state after a refused create", err, backend.ErrNotFound)
}

func testCreateMany(e *env) {
	ps := []*backend.CreateExecutionParams{e.spec(), e.spec(), e.spec()}
	ps[1].LaneID = ""
	ps[2].Priority = 9
	rs, err := e.d.CreateExecutions(e.ctx, ps)
	if len(rs) != 3 {
		e.t.Fatalf("%d results, want 3", len(rs))
	}
	wantErr(e.t, "create many with an invalid item", err, backend.ErrInvalidInput)
	if !strings.Contains(err.Error(), "item 1") || strings.Contains(err.Error(), "item 0") {
		e.t.Fatalf("error %q should name item 1 only", err)
	}
	if rs[0] == nil || rs[1] != nil || rs[2] == nil || rs[0].ExecutionID != ps[0].ExecutionID ||
		rs[2].ExecutionID != ps[2].ExecutionID || rs[0].Duplicate || rs[0].PublicState != model.PublicWaiting {
		e.t.Fatalf("results %+v %+v %+v", rs[0], rs[1], rs[2])
	}
	if c := e.mustClaim(); c.ExecutionID != ps[2].ExecutionID {
		e.t.Fatalf("claimed %s first, want the priority-9 %s", c.ExecutionID, ps[2].ExecutionID)
	}
	again, err := e.d.CreateExecutions(e.ctx, ps[:1])
	if err != nil || !again[0].Duplicate {
		e.t.Fatalf("repeat: %+v %v, want a duplicate", again[0], err)
	}
	empty, err := e.d.CreateExecutions(e.ctx, nil)
	if err != nil || len(empty) != 0 {
		e.t.Fatalf("create none: %v %v", empty, err)
	}
}

func testClaimNextEmpty(e *env) {
	if c := e.claimNext(); c != nil {
		e.t.Fatalf("claimed %+v on an empty lane", c)
	}
	_, err := e.d.ClaimNext(e.ctx, &backend.ClaimNextParams{LaneID: e.lane, WorkerID: "w", WorkerInstanceID: "wi"})
	wantErr(e.t, "claim next without a lease ttl", err, backend.ErrInvalidInput)
}

func testClaimNextJob(e *env) {
	p := e.spec()
	p.Namespace = "ns-" + e.lane
	id := e.create(p)
	before := time.Now().UnixMilli()
	c := e.mustClaim()
	if c.ExecutionID != id || c.LaneID != e.lane || c.Kind != "conformance" || c.Namespace != p.Namespace ||
		string(c.Payload) != "in" || c.FlowID != "" || c.AttemptType != "initial" {
		e.t.Fatalf("claim: %+v", c)
	}
	if c.Fence.LeaseEpoch < 1 || c.Fence.AttemptIndex != 0 || c.ExpiresAt < before+ttl/2 {
		e.t.Fatalf("claim fence %+v expires %d (claimed at %d)", c.Fence, c.ExpiresAt, before)
	}
	s := e.state(id)
	wantState(e.t, s, model.PhaseActive, model.PublicActive)
	if s.OwnershipState != model.OwnershipLeased || s.AttemptCount != 1 || s.LeaseEpoch != c.Fence.LeaseEpoch {
		e.t.Fatalf("state after claim: %+v", s)
	}
	if again := e.claimNext(); again != nil {
		e.t.Fatalf("claimed %s twice", again.ExecutionID)
	}
}

// nextMilli returns once the clock has passed the current millisecond:
// executions created in one millisecond tie on their eligible score, and
// Valkey orders a tie by id, so a test of age order creates the younger
// one after it. (The test servers run on this machine's clock.)
func nextMilli() {
	for t := time.Now().UnixMilli(); time.Now().UnixMilli() <= t; {
		runtime.Gosched()
	}
}

func testClaimNextOrder(e *env) {
	low := e.spec()
	e.create(low)
	high := e.spec()
	high.Priority = 5
	e.create(high)
	low2 := e.spec()
	nextMilli() // low2 is younger than low, not a same-millisecond tie
	e.create(low2)
	var got []model.ExecutionID
	for range 3 {
		got = append(got, e.mustClaim().ExecutionID)
	}
	want := []model.ExecutionID{high.ExecutionID, low.ExecutionID, low2.ExecutionID}
	if !slices.Equal(got, want) {
		e.t.Fatalf("claim order %v, want %v", got, want)
	}
}

func testClaimNextCapabilities(e *env) {
	p := e.spec()
	p.PolicyJSON = `{"routing_requirements":{"required_capabilities":["gpu"]}}`
	id := e.create(p)
	if c := e.claimNext("cpu"); c != nil {
		e.t.Fatalf("a worker without gpu claimed %s", c.ExecutionID)
	}
	_, err := e.d.ClaimExecution(e.ctx, &backend.ClaimExecutionParams{ExecutionID: id, WorkerID: "w",
		WorkerInstanceID: "wi", Capabilities: []string{"cpu"}, LeaseTTLMs: ttl})
	wantErr(e.t, "claim by id without the capability", err, backend.ErrCapabilityMismatch)
	if c := e.claimNext("cpu", "gpu"); c == nil || c.ExecutionID != id {
		e.t.Fatalf("a worker with gpu claimed %+v, want %s", c, id)
	}
}

func testClaimNextFlowMember(e *env) {
	flow := model.NewUUID()
	p := e.spec()
	p.ExecutionID = e.d.Partitions().NewFlowExecutionID(flow)
	p.FlowID, p.FlowKind = flow, "bt-flow"
	id := e.create(p)
	if s := e.state(id); s.FlowID != flow.String() {
		e.t.Fatalf("flow member state flow_id %q, want %s", s.FlowID, flow)
	}
	c := e.mustClaim()
	if c.ExecutionID != id || c.FlowID != flow.String() {
		e.t.Fatalf("claim: %+v, want %s of flow %s", c, id, flow)
	}
}

func testClaimNextPartitions(e *env) {
	p := e.spec()
	id := e.create(p)
	solo := e.d.Partitions().SoloPartition(e.lane).Index
	other := (solo + 1) % e.d.Partitions().Flow
	c, err := e.d.ClaimNext(e.ctx, &backend.ClaimNextParams{LaneID: e.lane, WorkerID: "w", WorkerInstanceID: "wi",
		LeaseTTLMs: ttl, Partitions: []uint16{other}})
	if err != nil || c != nil {
		e.t.Fatalf("claim on partition %d only: %+v %v, want nothing", other, c, err)
	}
	c, err = e.d.ClaimNext(e.ctx, &backend.ClaimNextParams{LaneID: e.lane, WorkerID: "w", WorkerInstanceID: "wi",
		LeaseTTLMs: ttl, Partitions: []uint16{other, solo}})
	if err != nil || c == nil || c.ExecutionID != id {
		e.t.Fatalf("claim on partitions %d,%d: %+v %v, want %s", other, solo, c, err, id)
	}
}

func testClaimByID(e *env) {
	first := e.create(e.spec())
	second := e.create(e.spec())
	params := func(id model.ExecutionID) *backend.ClaimExecutionParams {
		return &backend.ClaimExecutionParams{ExecutionID: id, WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: ttl}
	}
	c, err := e.d.ClaimExecution(e.ctx, params(second))
	if err != nil {
		e.t.Fatal(err)
	}
	if c.ExecutionID != second || c.LaneID != e.lane || string(c.Payload) != "in" || c.AttemptType != "initial" ||
		c.Fence.LeaseEpoch < 1 {
		e.t.Fatalf("claim by id: %+v", c)
	}
	_, err = e.d.ClaimExecution(e.ctx, params(second))
	wantErr(e.t, "claim a leased execution by id", err, backend.ErrNotClaimable)
	missing := e.d.Partitions().NewSoloExecutionID(e.lane)
	_, err = e.d.ClaimExecution(e.ctx, params(missing))
	wantErr(e.t, "claim a missing execution by id", err, backend.ErrNotFound)
	_, err = e.d.ClaimExecution(e.ctx, params("not-an-id"))
	wantErr(e.t, "claim a malformed id", err, backend.ErrInvalidInput)
	if n := e.mustClaim(); n.ExecutionID != first {
		e.t.Fatalf("claim next after claim by id: %s, want %s", n.ExecutionID, first)
	}
}

func testRenew(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	exp, err := e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: 2 * ttl})
	if err != nil {
		e.t.Fatal(err)
	}
	if exp < c.ExpiresAt+ttl/2 {
		e.t.Fatalf("renewed to %d, the claim expired at %d: want about %d ms later", exp, c.ExpiresAt, ttl)
	}
	stale := stale(c.Fence)
	_, err = e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: stale, LeaseTTLMs: ttl})
	wantErr(e.t, "renew with a stale fence", err, backend.ErrLeaseGone)
	e.complete(c, nil)
	_, err = e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl})
	wantErr(e.t, "renew after complete", err, backend.ErrLeaseGone)
}

// testErrorClasses: a refusal carries its FlowFabric code and is not
// transient, a transport failure is, a context's end is not; a repeat of
// a completion says it ended the execution only for its own fence and
// outcome (a driver may not tell at all).
func testErrorClasses(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	stale := stale(c.Fence)
	_, err := e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: stale, LeaseTTLMs: ttl})
	if err == nil || backend.CodeOf(err) != "stale_lease" || e.d.IsTransient(err) {
		e.t.Fatalf("renew with a stale fence: %v (code %q, transient %v), want a stale_lease refusal, not transient",
			err, backend.CodeOf(err), e.d.IsTransient(err))
	}
	for _, x := range []error{nil, context.Canceled, context.DeadlineExceeded, errors.New("something else")} {
		if e.d.IsTransient(x) {
			e.t.Errorf("IsTransient(%v) = true, want false", x)
		}
	}
	for _, x := range []error{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), fmt.Errorf("write: %w", net.ErrClosed),
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED)} {
		if !e.d.IsTransient(x) {
			e.t.Errorf("IsTransient(%v) = false, want true", x)
		}
	}
	cancelled, cancel := context.WithCancel(e.ctx)
	cancel()
	_, err = e.d.RenewLease(cancelled, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl})
	if err == nil || e.d.IsTransient(err) || backend.CodeOf(err) != "" {
		e.t.Fatalf("renew on a cancelled context: %v, want an error neither transient nor coded", err)
	}
	e.complete(c, nil)
	err = e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence})
	wantErr(e.t, "complete twice", err, backend.ErrLeaseGone)
	if backend.EndedBy(err, stale, model.OutcomeSuccess) || backend.EndedBy(err, c.Fence, model.OutcomeFailed) ||
		backend.EndedBy(err, c.Fence, "") {
		e.t.Fatalf("complete twice: %v says another fence or outcome ended the execution", err)
	}
	e.t.Logf("%s: the repeat of a completion tells its own ending: %v", e.d.Name(), backend.EndedBy(err, c.Fence, model.OutcomeSuccess))
}

func testComplete(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	stale := stale(c.Fence)
	err := e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: c.ExecutionID, Fence: stale})
	wantErr(e.t, "complete with a stale fence", err, backend.ErrLeaseGone)
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)

	e.complete(c, []byte("out"))
	s := e.state(c.ExecutionID)
	wantState(e.t, s, model.PhaseTerminal, model.PublicCompleted)
	if s.TerminalOutcome != model.OutcomeSuccess || s.OwnershipState != model.OwnershipUnowned {
		e.t.Fatalf("state after complete: %+v", s)
	}
	if b, err := e.d.ExecutionResult(e.ctx, c.ExecutionID); err != nil || string(b) != "out" {
		e.t.Fatalf("result: %q %v, want out", b, err)
	}
	err = e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence})
	wantErr(e.t, "complete twice", err, backend.ErrLeaseGone)
	missing := e.d.Partitions().NewSoloExecutionID(e.lane)
	err = e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: missing, Fence: c.Fence})
	wantErr(e.t, "complete a missing execution", err, backend.ErrNotFound)
	wantErr(e.t, "complete a missing execution", err, backend.ErrLeaseGone)
}

func testCompleteHolder(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	if err := e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence,
		Holder: backend.Holder{LaneID: c.LaneID, WorkerInstanceID: "bt-worker-1"}}); err != nil {
		e.t.Fatal(err)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseTerminal, model.PublicCompleted)
	if b, err := e.d.ExecutionResult(e.ctx, c.ExecutionID); err != nil || b != nil {
		e.t.Fatalf("result of a completion without one: %q %v, want nil", b, err)
	}
}

func testFailTerminal(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	r, err := e.d.FailExecution(e.ctx, &backend.FailExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence,
		FailureReason: "boom", FailureCategory: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	if r.RetryScheduled {
		e.t.Fatalf("fail without a retry policy scheduled a retry: %+v", r)
	}
	s := e.state(c.ExecutionID)
	wantState(e.t, s, model.PhaseTerminal, model.PublicFailed)
	if s.TerminalOutcome != model.OutcomeFailed || s.FailureReason != "boom" {
		e.t.Fatalf("state after fail: %+v", s)
	}
	_, err = e.d.FailExecution(e.ctx, &backend.FailExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence, FailureReason: "again"})
	wantErr(e.t, "fail twice", err, backend.ErrLeaseGone)
}

func testFailRetry(e *env) {
	p := e.spec()
	p.PolicyJSON = `{"retry_policy":{"max_retries":2,"backoff":{"type":"fixed","delay_ms":60000}}}`
	e.create(p)
	c := e.mustClaim()
	before := time.Now().UnixMilli()
	r, err := e.d.FailExecution(e.ctx, &backend.FailExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence,
		FailureReason: "flaky", FailureCategory: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	if !r.RetryScheduled || r.DelayUntil < before+30_000 {
		e.t.Fatalf("fail with retries left: %+v, want a retry about 60 s after %d", r, before)
	}
	s := e.state(c.ExecutionID)
	wantState(e.t, s, model.PhaseRunnable, model.PublicDelayed)
	if s.EligibilityState != model.EligibleNotUntilTime || s.RetryCount != 1 {
		e.t.Fatalf("state after a retried fail: %+v", s)
	}
	if n := e.claimNext(); n != nil {
		e.t.Fatalf("claimed %s during its retry backoff", n.ExecutionID)
	}
	_, err = e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl})
	wantErr(e.t, "renew after a retried fail", err, backend.ErrLeaseGone)
	stale := c.Fence
	stale.LeaseEpoch += 5
	_, err = e.d.FailExecution(e.ctx, &backend.FailExecutionParams{ExecutionID: c.ExecutionID, Fence: stale, FailureReason: "x"})
	wantErr(e.t, "fail with a stale fence", err, backend.ErrLeaseGone)
}

func testDelay(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	until := time.Now().Add(time.Hour).UnixMilli()
	stale := stale(c.Fence)
	err := e.d.DelayExecution(e.ctx, &backend.DelayExecutionParams{ExecutionID: c.ExecutionID, Fence: stale, DelayUntil: until})
	wantErr(e.t, "delay with a stale fence", err, backend.ErrLeaseGone)
	if err := e.d.DelayExecution(e.ctx, &backend.DelayExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence,
		DelayUntil: until}); err != nil {
		e.t.Fatal(err)
	}
	s := e.state(c.ExecutionID)
	wantState(e.t, s, model.PhaseRunnable, model.PublicDelayed)
	if s.EligibilityState != model.EligibleNotUntilTime || s.AttemptIndex != 0 || s.OwnershipState != model.OwnershipUnowned {
		e.t.Fatalf("state after delay: %+v", s)
	}
	if n := e.claimNext(); n != nil {
		e.t.Fatalf("claimed %s while delayed", n.ExecutionID)
	}
	_, err = e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl})
	wantErr(e.t, "renew after delay", err, backend.ErrLeaseGone)
	err = e.d.DelayExecution(e.ctx, &backend.DelayExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence, DelayUntil: until})
	wantErr(e.t, "delay twice", err, backend.ErrLeaseGone)
}

func testCancel(e *env) {
	id := e.create(e.spec())
	if err := e.d.CancelExecution(e.ctx, &backend.CancelExecutionParams{ExecutionID: id, Reason: "bt"}); err != nil {
		e.t.Fatal(err)
	}
	s := e.state(id)
	wantState(e.t, s, model.PhaseTerminal, model.PublicCancelled)
	if s.TerminalOutcome != model.OutcomeCancelled {
		e.t.Fatalf("state after cancel: %+v", s)
	}
	if c := e.claimNext(); c != nil {
		e.t.Fatalf("claimed cancelled %s", c.ExecutionID)
	}
	err := e.d.CancelExecution(e.ctx, &backend.CancelExecutionParams{ExecutionID: id, Reason: "again"})
	wantErr(e.t, "cancel twice", err, backend.ErrTerminal)
	err = e.d.CancelExecution(e.ctx, &backend.CancelExecutionParams{ExecutionID: e.d.Partitions().NewSoloExecutionID(e.lane)})
	wantErr(e.t, "cancel a missing execution", err, backend.ErrNotFound)
}

func testCancelLeased(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	if err := e.d.CancelExecution(e.ctx, &backend.CancelExecutionParams{ExecutionID: c.ExecutionID, Reason: "bt"}); err != nil {
		e.t.Fatal(err)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseTerminal, model.PublicCancelled)
	_, err := e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl})
	wantErr(e.t, "renew after cancel", err, backend.ErrLeaseGone)
	err = e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence})
	wantErr(e.t, "complete after cancel", err, backend.ErrLeaseGone)
}

func testNotFound(e *env) {
	missing := e.d.Partitions().NewSoloExecutionID(e.lane)
	_, err := e.d.ExecutionState(e.ctx, missing)
	wantErr(e.t, "state of a missing execution", err, backend.ErrNotFound)
	_, err = e.d.ExecutionResult(e.ctx, missing)
	wantErr(e.t, "result of a missing execution", err, backend.ErrNotFound)
	_, err = e.d.ExecutionState(e.ctx, "not-an-id")
	wantErr(e.t, "state of a malformed id", err, backend.ErrInvalidInput)
}

func testCompletions(e *env) {
	sub, err := e.d.SubscribeCompletions(e.ctx, &backend.SubscribeCompletionsParams{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer sub.Close()
	flow := model.NewUUID()
	member := func() *backend.CreateExecutionParams {
		p := e.spec()
		p.ExecutionID = e.d.Partitions().NewFlowExecutionID(flow)
		p.FlowID, p.FlowKind = flow, "bt-flow"
		return p
	}
	// A standalone execution ends first: it must not be delivered, so the
	// first event of this flow is the member's.
	e.create(e.spec())
	e.complete(e.mustClaim(), nil)
	ok, failed, cancelled := member(), member(), member()
	for _, p := range []*backend.CreateExecutionParams{ok, failed, cancelled} {
		e.create(p)
	}
	byID := map[model.ExecutionID]*backend.ClaimResult{}
	for range 3 {
		c := e.mustClaim()
		byID[c.ExecutionID] = c
	}
	e.complete(byID[ok.ExecutionID], []byte("r"))
	if _, err := e.d.FailExecution(e.ctx, &backend.FailExecutionParams{ExecutionID: failed.ExecutionID,
		Fence: byID[failed.ExecutionID].Fence, FailureReason: "boom"}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.d.CancelExecution(e.ctx, &backend.CancelExecutionParams{ExecutionID: cancelled.ExecutionID, Reason: "bt"}); err != nil {
		e.t.Fatal(err)
	}
	want := []backend.Completion{
		{ExecutionID: ok.ExecutionID, FlowID: flow, Outcome: model.OutcomeSuccess},
		{ExecutionID: failed.ExecutionID, FlowID: flow, Outcome: model.OutcomeFailed},
		{ExecutionID: cancelled.ExecutionID, FlowID: flow, Outcome: model.OutcomeCancelled},
	}
	var got []backend.Completion
	timeout := time.After(20 * time.Second)
	for len(got) < len(want) {
		select {
		case c, open := <-sub.C():
			if !open {
				e.t.Fatalf("subscription closed after %v: %v", got, sub.Err())
			}
			switch {
			case c.FlowID.IsZero():
				e.t.Fatalf("delivered a standalone execution: %+v", c)
			case c.FlowID == flow: // other subtests' flows are not this one's
				got = append(got, c)
			}
		case <-timeout:
			e.t.Fatalf("completions of flow %s: got %v, want %v", flow, got, want)
		}
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("completions of flow %s: got %v, want %v", flow, got, want)
	}
	sub.Close()
	for range sub.C() { // closed after Close
	}
	if err := sub.Err(); err != nil {
		e.t.Fatalf("Err after Close: %v", err)
	}
}

// RunUnmigrated checks that a driver on a backend without fabric's schema
// answers every operation with backend.ErrNotMigrated (a clear "run
// `fabric migrate`") rather than the server's raw error.
func RunUnmigrated(t *testing.T, newDriver func(t *testing.T) backend.Driver) {
	d := newDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lane := "bt-unmigrated"
	id := d.Partitions().NewSoloExecutionID(lane)
	f := backend.Fence{LeaseID: "l", LeaseEpoch: 1, AttemptID: "a"}
	ops := map[string]func() error{
		"CreateExecution": func() error {
			_, err := d.CreateExecution(ctx, &backend.CreateExecutionParams{ExecutionID: id, LaneID: lane})
			return err
		},
		"CreateExecutions": func() error {
			_, err := d.CreateExecutions(ctx, []*backend.CreateExecutionParams{{ExecutionID: id, LaneID: lane}})
			return err
		},
		"ClaimNext": func() error {
			_, err := d.ClaimNext(ctx, &backend.ClaimNextParams{LaneID: lane, WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: ttl})
			return err
		},
		"ClaimExecution": func() error {
			_, err := d.ClaimExecution(ctx, &backend.ClaimExecutionParams{ExecutionID: id, WorkerID: "w", WorkerInstanceID: "wi", LeaseTTLMs: ttl})
			return err
		},
		"RenewLease": func() error {
			_, err := d.RenewLease(ctx, &backend.RenewLeaseParams{ExecutionID: id, Fence: f, LeaseTTLMs: ttl})
			return err
		},
		"CompleteExecution": func() error {
			return d.CompleteExecution(ctx, &backend.CompleteExecutionParams{ExecutionID: id, Fence: f})
		},
		"FailExecution": func() error {
			_, err := d.FailExecution(ctx, &backend.FailExecutionParams{ExecutionID: id, Fence: f})
			return err
		},
		"DelayExecution": func() error {
			return d.DelayExecution(ctx, &backend.DelayExecutionParams{ExecutionID: id, Fence: f, DelayUntil: 1})
		},
		"CancelExecution": func() error { return d.CancelExecution(ctx, &backend.CancelExecutionParams{ExecutionID: id}) },
		"ExecutionState": func() error {
			_, err := d.ExecutionState(ctx, id)
			return err
		},
		"ExecutionResult": func() error {
			_, err := d.ExecutionResult(ctx, id)
			return err
		},
		"SubscribeCompletions": func() error {
			s, err := d.SubscribeCompletions(ctx, &backend.SubscribeCompletionsParams{})
			if s != nil {
				s.Close()
			}
			return err
		},
		"WatchTerminal": func() error { return d.WatchTerminal(ctx, func(int) {}, func() {}) },
	}
	for name, op := range controlUnmigrated(ctx, d, id, f) {
		ops[name] = op
	}
	for name, op := range budgetUnmigrated(ctx, d, id, f) {
		ops[name] = op
	}
	for name, op := range periodicUnmigrated(ctx, d) {
		ops[name] = op
	}
	for _, more := range []map[string]func() error{flowUnmigrated(ctx, d), attemptUnmigrated(ctx, d, id), workerUnmigrated(ctx, d),
		inspectorUnmigrated(ctx, d, id),
		claimerUnmigrated(ctx, t, d, id, f)} {
		for name, op := range more {
			ops[name] = op
		}
	}
	for _, name := range Operations {
		op, ok := ops[name]
		if !ok {
			t.Fatalf("RunUnmigrated has no case for %s", name)
		}
		t.Run(name, func(t *testing.T) {
			err := op()
			if !errors.Is(err, backend.ErrNotMigrated) || !strings.Contains(err.Error(), "fabric migrate") {
				t.Fatalf("%s on an unmigrated backend: %v, want backend.ErrNotMigrated", name, err)
			}
		})
	}
}

// testClaimNextConcurrent: workers claiming one lane at once take every
// execution exactly once, and each stops only when none is left.
func testClaimNextConcurrent(e *env) {
	const n, workers = 40, 4
	ps := make([]*backend.CreateExecutionParams, n)
	for i := range ps {
		ps[i] = e.spec()
	}
	if _, err := e.d.CreateExecutions(e.ctx, ps); err != nil {
		e.t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[model.ExecutionID]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := e.d.ClaimNext(e.ctx, &backend.ClaimNextParams{LaneID: e.lane, WorkerID: "bt-worker",
					WorkerInstanceID: fmt.Sprintf("bt-worker-%d", w), LeaseTTLMs: ttl})
				if err != nil {
					errs <- err
					return
				}
				if c == nil {
					return
				}
				mu.Lock()
				seen[c.ExecutionID]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("concurrent claim: %v", err)
	}
	for _, p := range ps {
		if seen[p.ExecutionID] != 1 {
			e.t.Fatalf("%s claimed %d times, want once (%d of %d claimed)", p.ExecutionID, seen[p.ExecutionID], len(seen), n)
		}
	}
}
