package backendtest

import (
	"fmt"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// runBadInput registers the cases of issue 42's defects 3 and 4: inputs
// of any size accepted whole, and every bad input answered one way on
// both drivers with nothing written.
func runBadInput(sub func(string, func(*env))) {
	sub("CreateExecution/ManyTags", testCreateManyTags)
	sub("CreateExecution/BadText", testCreateBadText)
	sub("CreateExecution/PayloadLimit", testCreatePayloadLimit)
	sub("CreateExecution/PastDeadline", testCreatePastDeadline)
	sub("SuspendExecution/ManySignalNames", testSuspendManySignalNames)
	sub("DeliverSignal/ForgedToken", testSignalForgedToken)
}

// nothingWritten asserts that refused creates of p's id left nothing
// behind: no state, nothing to claim on the lane, and the same id then
// creates a new execution (not a duplicate of a stranded one), which is
// claimed and completed to leave the lane empty.
func (e *env) nothingWritten(p *backend.CreateExecutionParams) {
	e.t.Helper()
	_, err := e.d.ExecutionState(e.ctx, p.ExecutionID)
	wantErr(e.t, "state after a refused create", err, backend.ErrNotFound)
	if c := e.claimNext(); c != nil {
		e.t.Fatalf("a refused create left %s claimable", c.ExecutionID)
	}
	q := e.spec()
	q.ExecutionID = p.ExecutionID
	e.create(q)
	c := e.mustClaim()
	if c.ExecutionID != p.ExecutionID {
		e.t.Fatalf("claimed %s, want the re-created %s", c.ExecutionID, p.ExecutionID)
	}
	e.complete(c, nil)
}

// 5,000 tags (10,000 HSET arguments on Valkey) are accepted whole: the
// execution is indexed, claimed and completed.
func testCreateManyTags(e *env) {
	p := e.spec()
	p.Tags = make(map[string]string, 5000)
	for i := range 5000 {
		p.Tags[fmt.Sprintf("bt.tag%04d", i)] = fmt.Sprintf("v%d", i)
	}
	id := e.create(p)
	wantState(e.t, e.state(id), model.PhaseRunnable, model.PublicWaiting)
	c := e.mustClaim()
	if c.ExecutionID != id {
		e.t.Fatalf("claimed %s, want %s", c.ExecutionID, id)
	}
	e.complete(c, nil)
	wantState(e.t, e.state(id), model.PhaseTerminal, model.PublicCompleted)
}

// Text a backend cannot store as sent — invalid UTF-8, a NUL — is
// ErrInvalidInput on both drivers, in any text field, before anything is
// written.
func testCreateBadText(e *env) {
	p := e.spec()
	for name, bad := range map[string]func(q *backend.CreateExecutionParams){
		"kind with invalid UTF-8": func(q *backend.CreateExecutionParams) { q.ExecutionKind = "k\xff\xfe" },
		"kind with NUL":           func(q *backend.CreateExecutionParams) { q.ExecutionKind = "k\x00ind" },
		"namespace with NUL":      func(q *backend.CreateExecutionParams) { q.Namespace = "n\x00" },
		"lane with invalid UTF-8": func(q *backend.CreateExecutionParams) { q.LaneID = e.lane + "\xc3" },
		"creator with NUL":        func(q *backend.CreateExecutionParams) { q.CreatorIdentity = "\x00" },
		"tag key with NUL":        func(q *backend.CreateExecutionParams) { q.Tags = map[string]string{"a\x00b": "v"} },
		"tag value not UTF-8":     func(q *backend.CreateExecutionParams) { q.Tags = map[string]string{"a": "\xff"} },
		"policy with a NUL escape": func(q *backend.CreateExecutionParams) {
			q.PolicyJSON = `{"retry_policy":{"note":"a\u0000b"}}`
		},
		"idempotency key with NUL": func(q *backend.CreateExecutionParams) { q.IdempotencyKey = "k\x00" },
	} {
		q := *p
		bad(&q)
		_, err := e.d.CreateExecution(e.ctx, &q)
		wantErr(e.t, "create with a "+name, err, backend.ErrInvalidInput)
		rs, err := e.d.CreateExecutions(e.ctx, []*backend.CreateExecutionParams{&q})
		wantErr(e.t, "create many with a "+name, err, backend.ErrInvalidInput)
		if len(rs) != 1 || rs[0] != nil {
			e.t.Fatalf("create many with a %s: results %v", name, rs)
		}
	}
	e.nothingWritten(p)
	// Valid UTF-8 beyond ASCII is kept as sent.
	q := e.spec()
	q.ExecutionKind = "kïnd-世界"
	if s := e.state(e.create(q)); s.Kind != q.ExecutionKind {
		e.t.Fatalf("kind stored as %q, want %q", s.Kind, q.ExecutionKind)
	}
}

// A payload over backend.DefaultMaxPayloadBytes (the drivers' default) is
// refused before anything is written; one at the limit is accepted.
func testCreatePayloadLimit(e *env) {
	p := e.spec()
	p.Payload = make([]byte, backend.DefaultMaxPayloadBytes+1)
	_, err := e.d.CreateExecution(e.ctx, p)
	wantErr(e.t, "create with a payload over the limit", err, backend.ErrInvalidInput)
	if !strings.Contains(err.Error(), "limit") {
		e.t.Fatalf("the refusal does not name the limit: %v", err)
	}
	e.nothingWritten(p)
	q := e.spec()
	q.Payload = []byte(strings.Repeat("p", backend.DefaultMaxPayloadBytes))
	e.create(q)
	if c := e.mustClaim(); len(c.Payload) != backend.DefaultMaxPayloadBytes {
		e.t.Fatalf("claimed a payload of %d bytes, want %d", len(c.Payload), backend.DefaultMaxPayloadBytes)
	}
}

// An execution deadline already past is refused at create (it would
// otherwise run to completion past its deadline); a future one is
// accepted.
func testCreatePastDeadline(e *env) {
	p := e.spec()
	p.ExecutionDeadlineAt = time.Now().Add(-time.Second).UnixMilli()
	_, err := e.d.CreateExecution(e.ctx, p)
	wantErr(e.t, "create with a deadline already past", err, backend.ErrInvalidInput)
	e.nothingWritten(p)
	q := e.spec()
	q.ExecutionDeadlineAt = time.Now().Add(time.Hour).UnixMilli()
	e.create(q)
}

// A suspension on 10,000 signal names is accepted whole: the last name
// resumes it.
func testSuspendManySignalNames(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	names := make([]string, 10000)
	for i := range names {
		names[i] = fmt.Sprintf("sig-%05d", i)
	}
	s := e.suspend(c, false, names...)
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
	r, err := e.signal(c.ExecutionID, s, names[len(names)-1])
	if err != nil || r.Effect != backend.EffectResumed {
		e.t.Fatalf("signal %s: %+v %v", names[len(names)-1], r, err)
	}
	if st := e.state(c.ExecutionID); st.LifecyclePhase != model.PhaseRunnable || st.EligibilityState != model.EligibleNow {
		e.t.Fatalf("state after the resuming signal: %+v", st)
	}
}

// A forged token is ErrInvalidToken on both drivers, whether its
// waitpoint exists or not, and changes nothing.
func testSignalForgedToken(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	s := e.suspend(c, false, "go")
	kid := s.Token[:strings.IndexByte(s.Token, ':')]
	for name, wp := range map[string]string{"its waitpoint": s.WaitpointID, "a missing waitpoint": model.NewUUID().String()} {
		for _, token := range []string{kid + ":" + strings.Repeat("ab", 20), kid + ":" + strings.Repeat("0", 64),
			"nokid:" + strings.Repeat("0", 64), "garbage"} {
			_, err := e.d.DeliverSignal(e.ctx, &backend.DeliverSignalParams{ExecutionID: c.ExecutionID, WaitpointID: wp,
				Token: token, SignalID: model.NewUUID().String(), Name: "go"})
			wantErr(e.t, "a forged token ("+token+") for "+name, err, backend.ErrInvalidToken)
		}
	}
	wantState(e.t, e.state(c.ExecutionID), model.PhaseSuspended, model.PublicSuspended)
	if r, err := e.signal(c.ExecutionID, s, "go"); err != nil || r.Effect != backend.EffectResumed {
		e.t.Fatalf("the right token: %+v %v", r, err)
	}
}
