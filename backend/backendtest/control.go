package backendtest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// controlOperations are the backend.ControlDriver operations the suite
// exercises (appended to Operations).
var controlOperations = []string{"CancelLeasedExecution", "CancelFlow", "SuspendExecution", "DeliverSignal",
	"AppendFrame", "ReadStream"}

func init() { Operations = append(Operations, controlOperations...) }

// runControl registers the ControlDriver subtests.
func runControl(sub func(name string, fn func(e *env))) {
	sub("CancelLeasedExecution", testCancelLeasedExecution)
	sub("CancelFlow", testCancelFlow)
	sub("SuspendExecution+DeliverSignal", testSuspendSignal)
	sub("SuspendExecution/MatchAll", testSuspendMatchAll)
	sub("SuspendExecution/InvalidInput", testSuspendInvalid)
	sub("DeliverSignal/Refused", testSignalRefused)
	sub("DeliverSignal/IdempotencyKey", testSignalIdempotency)
	sub("AppendFrame+ReadStream", testStream)
	runWaitpoints(sub)
	runChildren(sub)
}

// stale returns f with a newer epoch and another lease id.
func stale(f backend.Fence) backend.Fence {
	f.LeaseEpoch++
	f.LeaseID = model.NewUUID().String()
	return f
}

func testCancelLeasedExecution(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	p := &backend.CancelLeasedExecutionParams{ExecutionID: c.ExecutionID, Fence: stale(c.Fence), Reason: "bt",
		Holder: backend.Holder{LaneID: c.LaneID, WorkerInstanceID: "bt-worker-1"}}
	wantErr(e.t, "cancel with a stale fence", e.d.CancelLeasedExecution(e.ctx, p), backend.ErrLeaseGone)
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)
	bad := *p
	bad.ExecutionID = "not-an-id"
	wantErr(e.t, "cancel a malformed id", e.d.CancelLeasedExecution(e.ctx, &bad), backend.ErrInvalidInput)

	p.Fence = c.Fence
	if err := e.d.CancelLeasedExecution(e.ctx, p); err != nil {
		e.t.Fatal(err)
	}
	s := e.state(c.ExecutionID)
	wantState(e.t, s, model.PhaseTerminal, model.PublicCancelled)
	if s.TerminalOutcome != model.OutcomeCancelled {
		e.t.Fatalf("state after a holder's cancel: %+v", s)
	}
	_, err := e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl})
	wantErr(e.t, "renew after cancel", err, backend.ErrLeaseGone)
	wantErr(e.t, "cancel twice", e.d.CancelLeasedExecution(e.ctx, p), backend.ErrLeaseGone)
	if n := e.claimNext(); n != nil {
		e.t.Fatalf("claimed cancelled %s", n.ExecutionID)
	}
}

func testCancelFlow(e *env) {
	flow := model.NewUUID()
	member := func() model.ExecutionID {
		p := e.spec()
		p.ExecutionID = e.d.Partitions().NewFlowExecutionID(flow)
		p.FlowID, p.FlowKind = flow, "bt-flow"
		return e.create(p)
	}
	members := []model.ExecutionID{member(), member(), member()}
	// Members created in one millisecond tie on their eligible score, and
	// Valkey orders a tie by id: which two are claimed is the backend's
	// choice. The first claimed completes, the second stays leased.
	first, ran := e.mustClaim(), e.mustClaim()
	done, leased := first.ExecutionID, ran.ExecutionID
	var waiting model.ExecutionID
	for _, id := range members {
		if id != done && id != leased {
			waiting = id
		}
	}
	if done == leased || !slices.Contains(members, done) || !slices.Contains(members, leased) || waiting == "" {
		e.t.Fatalf("claimed %s then %s, want two of the flow's members %v", done, leased, members)
	}
	e.complete(first, nil)

	_, err := e.d.CancelFlow(e.ctx, &backend.CancelFlowParams{FlowID: model.NewUUID(), Reason: "bt"})
	wantErr(e.t, "cancel a missing flow", err, backend.ErrFlowNotFound)
	_, err = e.d.CancelFlow(e.ctx, &backend.CancelFlowParams{Reason: "bt"})
	wantErr(e.t, "cancel the zero flow", err, backend.ErrInvalidInput)
	wantState(e.t, e.state(waiting), model.PhaseRunnable, model.PublicWaiting)

	r, err := e.d.CancelFlow(e.ctx, &backend.CancelFlowParams{FlowID: flow, Reason: "bt"})
	if err != nil {
		e.t.Fatal(err)
	}
	got := slices.Clone(r.Members)
	want := []model.ExecutionID{leased, waiting}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		e.t.Fatalf("cancelled members %v, want %v", r.Members, want)
	}
	for _, id := range want {
		wantState(e.t, e.state(id), model.PhaseTerminal, model.PublicCancelled)
	}
	wantState(e.t, e.state(done), model.PhaseTerminal, model.PublicCompleted)
	err = e.d.CompleteExecution(e.ctx, &backend.CompleteExecutionParams{ExecutionID: leased, Fence: ran.Fence})
	wantErr(e.t, "complete a member of a cancelled flow", err, backend.ErrLeaseGone)
	_, err = e.d.CancelFlow(e.ctx, &backend.CancelFlowParams{FlowID: flow, Reason: "again"})
	wantErr(e.t, "cancel a cancelled flow", err, backend.ErrFlowTerminal)
}

// suspend suspends c on a fresh waitpoint waiting for names.
func (e *env) suspend(c *backend.ClaimResult, matchAll bool, names ...string) *backend.SuspendExecutionResult {
	e.t.Helper()
	r, err := e.d.SuspendExecution(e.ctx, e.suspendParams(c, matchAll, names...))
	if err != nil {
		e.t.Fatalf("suspend %s: %v", c.ExecutionID, err)
	}
	return r
}

func (e *env) suspendParams(c *backend.ClaimResult, matchAll bool, names ...string) *backend.SuspendExecutionParams {
	return &backend.SuspendExecutionParams{ExecutionID: c.ExecutionID, Fence: c.Fence,
		Holder:       backend.Holder{LaneID: c.LaneID, WorkerInstanceID: "bt-worker-1"},
		SuspensionID: model.NewUUID().String(), WaitpointID: model.NewUUID().String(),
		WaitpointKey: "wpk:" + model.NewUUID().String(), SignalNames: names, MatchAll: matchAll,
		TimeoutAt: time.Now().Add(time.Hour).UnixMilli()}
}

func (e *env) signal(id model.ExecutionID, s *backend.SuspendExecutionResult, name string) (*backend.DeliverSignalResult, error) {
	return e.d.DeliverSignal(e.ctx, &backend.DeliverSignalParams{ExecutionID: id, WaitpointID: s.WaitpointID,
		Token: s.Token, SignalID: model.NewUUID().String(), Name: name, Payload: []byte(`{"ok":true}`), Source: "bt"})
}

func testSuspendSignal(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	_, err := e.d.SuspendExecution(e.ctx, e.suspendParams(&backend.ClaimResult{ExecutionID: c.ExecutionID,
		Fence: stale(c.Fence), LaneID: c.LaneID}, false, "go"))
	wantErr(e.t, "suspend with a stale fence", err, backend.ErrLeaseGone)
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)

	s := e.suspend(c, false, "go")
	if s.Token == "" || s.WaitpointID == "" || s.WaitpointKey == "" || s.SuspensionID == "" {
		e.t.Fatalf("suspend result %+v", s)
	}
	st := e.state(c.ExecutionID)
	wantState(e.t, st, model.PhaseSuspended, model.PublicSuspended)
	if st.OwnershipState == model.OwnershipLeased {
		e.t.Fatalf("a suspended execution is still leased: %+v", st)
	}
	_, err = e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl})
	wantErr(e.t, "renew after suspend", err, backend.ErrLeaseGone)
	if n := e.claimNext(); n != nil {
		e.t.Fatalf("claimed suspended %s", n.ExecutionID)
	}

	r, err := e.signal(c.ExecutionID, s, "other")
	if err != nil {
		e.t.Fatalf("a signal outside the condition: %v", err)
	}
	if r.Effect == backend.EffectResumed {
		e.t.Fatalf("a signal outside the condition resumed: %+v", r)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)

	r, err = e.signal(c.ExecutionID, s, "go")
	if err != nil {
		e.t.Fatal(err)
	}
	if r.Effect != backend.EffectResumed || r.SignalID == "" {
		e.t.Fatalf("the awaited signal: %+v, want %s", r, backend.EffectResumed)
	}
	st = e.state(c.ExecutionID)
	if st.LifecyclePhase != model.PhaseRunnable || st.EligibilityState != model.EligibleNow {
		e.t.Fatalf("state after the resuming signal: %+v", st)
	}
	n := e.mustClaim()
	if n.ExecutionID != c.ExecutionID || n.AttemptType != "resumed" || n.Fence.AttemptIndex != c.Fence.AttemptIndex ||
		n.Fence.LeaseEpoch <= c.Fence.LeaseEpoch {
		e.t.Fatalf("claim after resume: %+v (suspended fence %+v)", n, c.Fence)
	}
	_, err = e.signal(c.ExecutionID, s, "go")
	if !errors.Is(err, backend.ErrNotSuspended) && !errors.Is(err, backend.ErrWaitpointNotFound) {
		e.t.Fatalf("a signal after the resume: %v, want ErrNotSuspended or ErrWaitpointNotFound", err)
	}
	e.complete(n, []byte("done"))
}

func testSuspendMatchAll(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	s := e.suspend(c, true, "a", "b")
	r, err := e.signal(c.ExecutionID, s, "a")
	if err != nil || r.Effect != backend.EffectAppended {
		e.t.Fatalf("first of two awaited signals: %+v %v, want %s", r, err, backend.EffectAppended)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
	r, err = e.signal(c.ExecutionID, s, "b")
	if err != nil || r.Effect != backend.EffectResumed {
		e.t.Fatalf("second of two awaited signals: %+v %v, want %s", r, err, backend.EffectResumed)
	}
	if n := e.mustClaim(); n.ExecutionID != c.ExecutionID {
		e.t.Fatalf("claimed %s, want resumed %s", n.ExecutionID, c.ExecutionID)
	}
}

func testSuspendInvalid(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	p := e.suspendParams(c, false)
	p.WaitpointKey = ""
	_, err := e.d.SuspendExecution(e.ctx, p)
	wantErr(e.t, "suspend without a waitpoint key", err, backend.ErrInvalidInput)
	p = e.suspendParams(c, false)
	p.ExecutionID = "not-an-id"
	_, err = e.d.SuspendExecution(e.ctx, p)
	wantErr(e.t, "suspend a malformed id", err, backend.ErrInvalidInput)
	// Nothing was written: the lease still holds and renews.
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)
	if _, err := e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl}); err != nil {
		e.t.Fatalf("renew after refused suspends: %v", err)
	}
}

func testSignalRefused(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	s := e.suspend(c, false)
	forged := *s
	forged.Token = s.Token[:strings.LastIndexByte(s.Token, ':')+1] + strings.Repeat("0", 64)
	_, err := e.signal(c.ExecutionID, &forged, "x")
	wantErr(e.t, "a signal with a forged token", err, backend.ErrInvalidToken)
	missing := *s
	missing.WaitpointID = model.NewUUID().String()
	_, err = e.signal(c.ExecutionID, &missing, "x")
	// Another waitpoint's token authenticates nothing: ErrInvalidToken on
	// both drivers (authenticated before the waitpoint is looked up).
	wantErr(e.t, "a signal to a missing waitpoint", err, backend.ErrInvalidToken)
	_, err = e.d.DeliverSignal(e.ctx, &backend.DeliverSignalParams{ExecutionID: c.ExecutionID, WaitpointID: s.WaitpointID,
		Token: s.Token, SignalID: model.NewUUID().String()})
	wantErr(e.t, "a signal without a name", err, backend.ErrInvalidInput)
	// Nothing resumed it; the right token still does (any name).
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
	if r, err := e.signal(c.ExecutionID, s, "x"); err != nil || r.Effect != backend.EffectResumed {
		e.t.Fatalf("the right token: %+v %v", r, err)
	}
}

func testSignalIdempotency(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	s := e.suspend(c, true, "a", "b")
	deliver := func(name, key string) *backend.DeliverSignalResult {
		e.t.Helper()
		r, err := e.d.DeliverSignal(e.ctx, &backend.DeliverSignalParams{ExecutionID: c.ExecutionID, WaitpointID: s.WaitpointID,
			Token: s.Token, SignalID: model.NewUUID().String(), Name: name, Source: "bt", IdempotencyKey: key})
		if err != nil {
			e.t.Fatalf("signal %s (key %q): %v", name, key, err)
		}
		return r
	}
	first := deliver("a", "k-a")
	if first.Duplicate || first.Effect != backend.EffectAppended {
		e.t.Fatalf("first delivery: %+v", first)
	}
	again := deliver("a", "k-a")
	if !again.Duplicate || again.SignalID != first.SignalID {
		e.t.Fatalf("repeat of key k-a: %+v, want a duplicate of %s", again, first.SignalID)
	}
	// The duplicate counted nothing: "b" under k-a is a duplicate too, and
	// the condition (a and b) waits for a "b" under its own key.
	if r := deliver("b", "k-a"); !r.Duplicate {
		e.t.Fatalf("another name under a used key: %+v, want a duplicate", r)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
	if r := deliver("b", "k-b"); r.Duplicate || r.Effect != backend.EffectResumed {
		e.t.Fatalf("b under its own key: %+v, want %s", r, backend.EffectResumed)
	}
}

func testStream(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	app := func(f backend.Fence, typ, payload, corr string) (string, error) {
		r, err := e.d.AppendFrame(e.ctx, &backend.AppendFrameParams{ExecutionID: c.ExecutionID, Fence: f, FrameType: typ,
			Payload: []byte(payload), CorrelationID: corr})
		if err != nil {
			return "", err
		}
		return r.EntryID, nil
	}
	var ids []string
	for i, p := range []string{"one", "two", "three"} {
		corr := ""
		if i == 1 {
			corr = "c-2"
		}
		id, err := app(c.Fence, "log", p, corr)
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i := 1; i < len(ids); i++ {
		if entryLess(ids[i], ids[i-1]) || ids[i] == ids[i-1] {
			e.t.Fatalf("entry ids %v do not increase", ids)
		}
	}
	_, err := app(stale(c.Fence), "log", "stale", "")
	wantErr(e.t, "append with a stale fence", err, backend.ErrLeaseGone)
	_, err = app(c.Fence, "", "untyped", "")
	wantErr(e.t, "append without a frame type", err, backend.ErrInvalidInput)

	read := func(after string, count int) *backend.StreamRead {
		e.t.Helper()
		r, err := e.d.ReadStream(e.ctx, &backend.ReadStreamParams{ExecutionID: c.ExecutionID, AttemptIndex: c.Fence.AttemptIndex,
			After: after, Count: count})
		if err != nil {
			e.t.Fatalf("read after %q: %v", after, err)
		}
		return r
	}
	all := read("", 100)
	if len(all.Frames) != 3 || all.Closed {
		e.t.Fatalf("read all: %+v, want the 3 frames, open", all)
	}
	for i, f := range all.Frames {
		if f.ID != ids[i] || f.Fields["frame_type"] != "log" || f.Fields["payload"] != []string{"one", "two", "three"}[i] {
			e.t.Fatalf("frame %d: %+v (ids %v)", i, f, ids)
		}
	}
	if all.Frames[1].Fields["correlation_id"] != "c-2" {
		e.t.Fatalf("frame 1 fields %v, want correlation_id c-2", all.Frames[1].Fields)
	}
	if r := read(ids[0], 100); len(r.Frames) != 2 || r.Frames[0].ID != ids[1] {
		e.t.Fatalf("read after %s: %+v", ids[0], r.Frames)
	}
	if r := read("", 1); len(r.Frames) != 1 || r.Frames[0].ID != ids[0] {
		e.t.Fatalf("read 1: %+v", r.Frames)
	}
	_, err = e.d.ReadStream(e.ctx, &backend.ReadStreamParams{ExecutionID: c.ExecutionID, After: "x", Count: 1})
	wantErr(e.t, "read after a malformed entry id", err, backend.ErrInvalidInput)
	_, err = e.d.ReadStream(e.ctx, &backend.ReadStreamParams{ExecutionID: c.ExecutionID, Count: 0})
	wantErr(e.t, "read 0 frames", err, backend.ErrInvalidInput)
	if r := read("", 100); len(r.Frames) != 3 {
		e.t.Fatalf("refused appends wrote frames: %+v", r.Frames)
	}
	e.complete(c, nil)
	if r := read("", 100); !r.Closed || len(r.Frames) != 3 {
		e.t.Fatalf("read after complete: %+v, want 3 frames, closed", r)
	}
	_, err = app(c.Fence, "log", "late", "")
	wantErr(e.t, "append after complete", err, backend.ErrLeaseGone)
}

// entryLess compares stream entry ids "<ms>-<seq>" numerically.
func entryLess(a, b string) bool {
	split := func(s string) (int64, int64) {
		ms, seq, _ := strings.Cut(s, "-")
		x, _ := strconv.ParseInt(ms, 10, 64)
		y, _ := strconv.ParseInt(seq, 10, 64)
		return x, y
	}
	am, as := split(a)
	bm, bs := split(b)
	return am < bm || am == bm && as < bs
}

// controlUnmigrated are RunUnmigrated's cases of the ControlDriver
// operations.
func controlUnmigrated(ctx context.Context, d backend.Driver, id model.ExecutionID, f backend.Fence) map[string]func() error {
	wp := model.NewUUID().String()
	ops := waitpointUnmigrated(ctx, d, id, f)
	for name, op := range childrenUnmigrated(ctx, d, id, f) {
		ops[name] = op
	}
	for name, op := range map[string]func() error{
		"CancelLeasedExecution": func() error {
			return d.CancelLeasedExecution(ctx, &backend.CancelLeasedExecutionParams{ExecutionID: id, Fence: f})
		},
		"CancelFlow": func() error {
			_, err := d.CancelFlow(ctx, &backend.CancelFlowParams{FlowID: model.NewUUID()})
			return err
		},
		"SuspendExecution": func() error {
			_, err := d.SuspendExecution(ctx, &backend.SuspendExecutionParams{ExecutionID: id, Fence: f,
				SuspensionID: model.NewUUID().String(), WaitpointID: wp, WaitpointKey: "k"})
			return err
		},
		"DeliverSignal": func() error {
			_, err := d.DeliverSignal(ctx, &backend.DeliverSignalParams{ExecutionID: id, WaitpointID: wp, Token: "k:00",
				SignalID: model.NewUUID().String(), Name: "n"})
			return err
		},
		"AppendFrame": func() error {
			_, err := d.AppendFrame(ctx, &backend.AppendFrameParams{ExecutionID: id, Fence: f, FrameType: "log"})
			return err
		},
		"ReadStream": func() error {
			_, err := d.ReadStream(ctx, &backend.ReadStreamParams{ExecutionID: id, Count: 1})
			return err
		},
	} {
		ops[name] = op
	}
	return ops
}
