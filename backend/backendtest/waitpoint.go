package backendtest

import (
	"context"
	"errors"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// waitpointOperations are the backend.WaitpointDriver operations the
// suite exercises (appended to Operations).
var waitpointOperations = []string{"CreatePendingWaitpoint"}

func init() { Operations = append(Operations, waitpointOperations...) }

// runWaitpoints registers the pending and multi-waitpoint subtests.
func runWaitpoints(sub func(name string, fn func(e *env))) {
	sub("CreatePendingWaitpoint/BufferedSatisfies", testPendingSatisfied)
	sub("CreatePendingWaitpoint/SuspendThenSignal", testPendingSuspend)
	sub("CreatePendingWaitpoint/Refused", testPendingRefused)
	sub("SuspendExecution/ExtraWaitpoints", testExtraWaitpoints)
	sub("SuspendExecution/AllWaitpoints", testAllWaitpoints)
	sub("SuspendExecution/WaitpointQuorum", testWaitpointQuorum)
	sub("SuspendExecution/WaitpointsInvalid", testWaitpointsInvalid)
}

func (e *env) pending(c *backend.ClaimResult, f backend.Fence) (*backend.Waitpoint, error) {
	return e.d.CreatePendingWaitpoint(e.ctx, &backend.CreatePendingWaitpointParams{ExecutionID: c.ExecutionID, Fence: f,
		WaitpointID: model.NewUUID().String(), WaitpointKey: "pwk:" + model.NewUUID().String(),
		ExpiresAt: time.Now().Add(time.Hour).UnixMilli()})
}

func (e *env) signalTo(id model.ExecutionID, wp backend.Waitpoint, name, key string) *backend.DeliverSignalResult {
	e.t.Helper()
	r, err := e.d.DeliverSignal(e.ctx, &backend.DeliverSignalParams{ExecutionID: id, WaitpointID: wp.ID, Token: wp.Token,
		SignalID: model.NewUUID().String(), Name: name, Payload: []byte(`{}`), Source: "bt", IdempotencyKey: key})
	if err != nil {
		e.t.Fatalf("signal %s to %s: %v", name, wp.Key, err)
	}
	return r
}

func (e *env) renews(c *backend.ClaimResult) {
	e.t.Helper()
	if _, err := e.d.RenewLease(e.ctx, &backend.RenewLeaseParams{ExecutionID: c.ExecutionID, Fence: c.Fence, LeaseTTLMs: ttl}); err != nil {
		e.t.Fatalf("renew %s: %v", c.ExecutionID, err)
	}
}

// testPendingSatisfied: a signal to a pending waitpoint is buffered (a
// keyed repeat is a duplicate), and a suspend on the waitpoint that the
// buffered signal satisfies suspends nothing: AlreadySatisfied, the lease
// still holds, the waitpoint is closed.
func testPendingSatisfied(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	wp, err := e.pending(c, c.Fence)
	if err != nil {
		e.t.Fatal(err)
	}
	if wp.ID == "" || wp.Key == "" || wp.Token == "" {
		e.t.Fatalf("pending waitpoint %+v", wp)
	}
	r := e.signalTo(c.ExecutionID, *wp, "callback", "k1")
	if r.Effect != backend.EffectBuffered || r.Duplicate {
		e.t.Fatalf("a signal to a pending waitpoint: %+v, want %s", r, backend.EffectBuffered)
	}
	if again := e.signalTo(c.ExecutionID, *wp, "callback", "k1"); !again.Duplicate || again.SignalID != r.SignalID {
		e.t.Fatalf("a keyed repeat: %+v, want a duplicate of %s", again, r.SignalID)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)
	p := e.suspendParams(c, false, "callback")
	p.PendingWaitpointID = wp.ID
	s, err := e.d.SuspendExecution(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if !s.AlreadySatisfied || s.WaitpointID != wp.ID || s.WaitpointKey != wp.Key || s.Token != wp.Token {
		e.t.Fatalf("suspend on a satisfied pending waitpoint: %+v (waitpoint %+v)", s, wp)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)
	e.renews(c)
	_, err = e.d.DeliverSignal(e.ctx, &backend.DeliverSignalParams{ExecutionID: c.ExecutionID, WaitpointID: wp.ID,
		Token: wp.Token, SignalID: model.NewUUID().String(), Name: "callback"})
	if !errors.Is(err, backend.ErrNotSuspended) && !errors.Is(err, backend.ErrWaitpointNotFound) {
		e.t.Fatalf("a signal to the closed waitpoint: %v, want ErrNotSuspended or ErrWaitpointNotFound", err)
	}
	e.complete(c, []byte("called back"))
}

// testPendingSuspend: buffered signals that do not satisfy the condition
// count once the attempt suspends on the pending waitpoint (all of a and
// b: a buffered, b after), and the same attempt resumes.
func testPendingSuspend(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	wp, err := e.pending(c, c.Fence)
	if err != nil {
		e.t.Fatal(err)
	}
	if r := e.signalTo(c.ExecutionID, *wp, "a", ""); r.Effect != backend.EffectBuffered {
		e.t.Fatalf("buffered a: %+v", r)
	}
	// A second pending waitpoint, for a later suspend: it outlives the
	// first suspension.
	later, err := e.pending(c, c.Fence)
	if err != nil {
		e.t.Fatal(err)
	}
	p := e.suspendParams(c, true, "a", "b")
	p.PendingWaitpointID = wp.ID
	s, err := e.d.SuspendExecution(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if s.AlreadySatisfied || s.WaitpointID != wp.ID || s.Token != wp.Token {
		e.t.Fatalf("suspend on a pending waitpoint: %+v", s)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
	if r := e.signalTo(c.ExecutionID, *wp, "b", ""); r.Effect != backend.EffectResumed {
		e.t.Fatalf("b after the buffered a: %+v, want %s", r, backend.EffectResumed)
	}
	n := e.mustClaim()
	if n.ExecutionID != c.ExecutionID || n.AttemptType != "resumed" || n.Fence.AttemptIndex != c.Fence.AttemptIndex {
		e.t.Fatalf("claim after resume: %+v", n)
	}
	if r := e.signalTo(c.ExecutionID, *later, "c", ""); r.Effect != backend.EffectBuffered {
		e.t.Fatalf("a signal to the later pending waitpoint: %+v", r)
	}
	p = e.suspendParams(n, false, "c")
	p.PendingWaitpointID = later.ID
	if s, err := e.d.SuspendExecution(e.ctx, p); err != nil || !s.AlreadySatisfied {
		e.t.Fatalf("suspend on the later pending waitpoint: %+v %v", s, err)
	}
	e.complete(n, nil)
}

// testPendingRefused: refused creates and suspends write nothing.
func testPendingRefused(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	bad := &backend.CreatePendingWaitpointParams{ExecutionID: c.ExecutionID, Fence: c.Fence, WaitpointID: "x",
		WaitpointKey: "k", ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
	_, err := e.d.CreatePendingWaitpoint(e.ctx, bad)
	wantErr(e.t, "a pending waitpoint with a malformed id", err, backend.ErrInvalidInput)
	bad.WaitpointID, bad.ExpiresAt = model.NewUUID().String(), 0
	_, err = e.d.CreatePendingWaitpoint(e.ctx, bad)
	wantErr(e.t, "a pending waitpoint without expiry", err, backend.ErrInvalidInput)
	bad.ExpiresAt, bad.WaitpointKey = time.Now().Add(time.Hour).UnixMilli(), ""
	_, err = e.d.CreatePendingWaitpoint(e.ctx, bad)
	wantErr(e.t, "a pending waitpoint without a key", err, backend.ErrInvalidInput)
	wp, err := e.pending(c, c.Fence)
	if err != nil {
		e.t.Fatal(err)
	}
	// A suspend on a pending waitpoint that does not exist, or with extra
	// waitpoints, suspends nothing.
	p := e.suspendParams(c, false)
	p.PendingWaitpointID = model.NewUUID().String()
	_, err = e.d.SuspendExecution(e.ctx, p)
	wantErr(e.t, "suspend on a missing pending waitpoint", err, backend.ErrWaitpointNotFound)
	p.PendingWaitpointID = wp.ID
	p.Extra = []backend.WaitpointBinding{{WaitpointID: model.NewUUID().String(), WaitpointKey: "x"}}
	_, err = e.d.SuspendExecution(e.ctx, p)
	wantErr(e.t, "suspend on a pending waitpoint with extras", err, backend.ErrInvalidInput)
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)
	e.renews(c)
	e.complete(c, nil)
	_, err = e.pending(c, c.Fence)
	wantErr(e.t, "a pending waitpoint after complete", err, backend.ErrLeaseGone)
}

// extras suspends c on a primary waitpoint and two extra ones, as set by
// edit, and returns the three waitpoints in order.
func (e *env) extras(c *backend.ClaimResult, edit func(p *backend.SuspendExecutionParams), names ...string) []backend.Waitpoint {
	e.t.Helper()
	p := e.suspendParams(c, false, names...)
	p.Extra = []backend.WaitpointBinding{{WaitpointID: model.NewUUID().String(), WaitpointKey: "x1:" + model.NewUUID().String()},
		{WaitpointID: model.NewUUID().String(), WaitpointKey: "x2:" + model.NewUUID().String()}}
	edit(p)
	s, err := e.d.SuspendExecution(e.ctx, p)
	if err != nil {
		e.t.Fatalf("suspend %s with extras: %v", c.ExecutionID, err)
	}
	wps := append([]backend.Waitpoint{{ID: s.WaitpointID, Key: s.WaitpointKey, Token: s.Token}}, s.Extra...)
	if len(wps) != 3 {
		e.t.Fatalf("suspend with two extras: %+v", s)
	}
	seen := map[string]bool{}
	for i, wp := range wps {
		if wp.ID == "" || wp.Token == "" || seen[wp.ID] || seen[wp.Token] || i > 0 && (wp.ID != p.Extra[i-1].WaitpointID || wp.Key != p.Extra[i-1].WaitpointKey) {
			e.t.Fatalf("waitpoints %+v (extras asked %+v)", wps, p.Extra)
		}
		seen[wp.ID], seen[wp.Token] = true, true
	}
	return wps
}

// testExtraWaitpoints: each waitpoint has its own token (another's is
// refused) and a matching signal on any one of them resumes.
func testExtraWaitpoints(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	wps := e.extras(c, func(*backend.SuspendExecutionParams) {}, "approve")
	forged := wps[1]
	forged.Token = wps[0].Token
	_, err := e.d.DeliverSignal(e.ctx, &backend.DeliverSignalParams{ExecutionID: c.ExecutionID, WaitpointID: forged.ID,
		Token: forged.Token, SignalID: model.NewUUID().String(), Name: "approve"})
	wantErr(e.t, "another waitpoint's token", err, backend.ErrInvalidToken)
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
	if r := e.signalTo(c.ExecutionID, wps[2], "approve", ""); r.Effect != backend.EffectResumed {
		e.t.Fatalf("approve on the second extra: %+v", r)
	}
	n := e.mustClaim()
	if n.ExecutionID != c.ExecutionID || n.AttemptType != "resumed" {
		e.t.Fatalf("claim after resume: %+v", n)
	}
	e.complete(n, nil)
}

// testAllWaitpoints: every waitpoint must receive the awaited name; a
// second one on a satisfied waitpoint counts nothing, another name is
// refused by the matcher.
func testAllWaitpoints(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	wps := e.extras(c, func(p *backend.SuspendExecutionParams) { p.AllWaitpoints = true }, "approve")
	steps := []struct {
		wp     int
		name   string
		effect string
	}{
		{0, "approve", backend.EffectAppended},
		{0, "approve", "appended_to_waitpoint_duplicate"},
		{1, "reject", "signal_ignored_matcher_failed"},
		{1, "approve", backend.EffectAppended},
		{2, "approve", backend.EffectResumed},
	}
	for i, s := range steps {
		if i == len(steps)-1 {
			wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
		}
		if r := e.signalTo(c.ExecutionID, wps[s.wp], s.name, ""); r.Effect != s.effect {
			e.t.Fatalf("step %d (%s on waitpoint %d): %+v, want %s", i, s.name, s.wp, r, s.effect)
		}
	}
	n := e.mustClaim()
	if n.ExecutionID != c.ExecutionID || n.AttemptType != "resumed" {
		e.t.Fatalf("claim after resume: %+v", n)
	}
	e.complete(n, nil)
}

// testWaitpointQuorum: two distinct waitpoints of three resume (any
// name: no signal names).
func testWaitpointQuorum(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	wps := e.extras(c, func(p *backend.SuspendExecutionParams) { p.WaitpointQuorum = 2 })
	if r := e.signalTo(c.ExecutionID, wps[1], "lgtm", ""); r.Effect != backend.EffectAppended {
		e.t.Fatalf("first reviewer: %+v", r)
	}
	if r := e.signalTo(c.ExecutionID, wps[1], "again", ""); r.Effect != "appended_to_waitpoint_duplicate" {
		e.t.Fatalf("the same reviewer twice: %+v", r)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
	if r := e.signalTo(c.ExecutionID, wps[0], "ok", ""); r.Effect != backend.EffectResumed {
		e.t.Fatalf("second reviewer: %+v", r)
	}
	if n := e.mustClaim(); n.ExecutionID != c.ExecutionID {
		e.t.Fatalf("claimed %s, want resumed %s", n.ExecutionID, c.ExecutionID)
	}
}

// testWaitpointsInvalid: malformed waitpoint sets are refused before
// anything is written.
func testWaitpointsInvalid(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	x := func() backend.WaitpointBinding {
		return backend.WaitpointBinding{WaitpointID: model.NewUUID().String(), WaitpointKey: "x:" + model.NewUUID().String()}
	}
	cases := map[string]func(p *backend.SuspendExecutionParams){
		"AllWithoutExtras": func(p *backend.SuspendExecutionParams) { p.AllWaitpoints = true },
		"QuorumTooLarge": func(p *backend.SuspendExecutionParams) {
			p.Extra, p.WaitpointQuorum = []backend.WaitpointBinding{x()}, 3
		},
		"AllAndQuorum": func(p *backend.SuspendExecutionParams) {
			p.Extra, p.AllWaitpoints, p.WaitpointQuorum = []backend.WaitpointBinding{x()}, true, 1
		},
		"CompositeTwoNames": func(p *backend.SuspendExecutionParams) {
			p.Extra, p.AllWaitpoints, p.SignalNames = []backend.WaitpointBinding{x()}, true, []string{"a", "b"}
		},
		"ExtraNoKey": func(p *backend.SuspendExecutionParams) {
			p.Extra = []backend.WaitpointBinding{{WaitpointID: model.NewUUID().String()}}
		},
		"ExtraDuplicateKey": func(p *backend.SuspendExecutionParams) {
			y := x()
			p.Extra = []backend.WaitpointBinding{y, {WaitpointID: model.NewUUID().String(), WaitpointKey: y.WaitpointKey}}
		},
		"ExtraBadID": func(p *backend.SuspendExecutionParams) {
			p.Extra = []backend.WaitpointBinding{{WaitpointID: "x", WaitpointKey: "k"}}
		},
	}
	for name, edit := range cases {
		p := e.suspendParams(c, false)
		edit(p)
		_, err := e.d.SuspendExecution(e.ctx, p)
		wantErr(e.t, name, err, backend.ErrInvalidInput)
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseActive, model.PublicActive)
	e.renews(c)
}

// waitpointUnmigrated are RunUnmigrated's cases of the WaitpointDriver
// operations.
func waitpointUnmigrated(ctx context.Context, d backend.Driver, id model.ExecutionID, f backend.Fence) map[string]func() error {
	return map[string]func() error{
		"CreatePendingWaitpoint": func() error {
			_, err := d.CreatePendingWaitpoint(ctx, &backend.CreatePendingWaitpointParams{ExecutionID: id, Fence: f,
				WaitpointID: model.NewUUID().String(), WaitpointKey: "k", ExpiresAt: 1})
			return err
		},
	}
}
