package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// attemptOperations are the backend.AttemptReadDriver operations the
// suite exercises (appended to Operations).
var attemptOperations = []string{"TailStream", "ReadSummary", "ResumeSignals"}

func init() { Operations = append(Operations, attemptOperations...) }

// runAttemptReads registers the AttemptReadDriver subtests.
func runAttemptReads(sub func(name string, fn func(e *env))) {
	sub("TailStream", testTailStream)
	sub("ReadSummary", testReadSummary)
	sub("ResumeSignals", testResumeSignals)
	sub("ResumeSignals/PendingWaitpoint", testResumeSignalsPending)
}

func (e *env) appendFrame(c *backend.ClaimResult, mode, payload string) string {
	e.t.Helper()
	r, err := e.d.AppendFrame(e.ctx, &backend.AppendFrameParams{ExecutionID: c.ExecutionID, Fence: c.Fence,
		FrameType: "log", Payload: []byte(payload), Mode: mode})
	if err != nil {
		e.t.Fatalf("append to %s: %v", c.ExecutionID, err)
	}
	return r.EntryID
}

func (e *env) tail(c *backend.ClaimResult, after string, block time.Duration) *backend.StreamRead {
	e.t.Helper()
	r, err := e.d.TailStream(e.ctx, &backend.TailStreamParams{ReadStreamParams: backend.ReadStreamParams{
		ExecutionID: c.ExecutionID, AttemptIndex: c.Fence.AttemptIndex, After: after, Count: 10}, Block: block})
	if err != nil {
		e.t.Fatalf("tail %s after %q: %v", c.ExecutionID, after, err)
	}
	return r
}

// testTailStream: a tail returns a frame appended while it waits, reads
// nothing (open) when none comes in time, and reports the stream closed
// once the attempt ended.
func testTailStream(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	if r := e.tail(c, "", 20*time.Millisecond); len(r.Frames) != 0 || r.Closed {
		e.t.Fatalf("tail of an empty stream: %+v", r)
	}
	got := make(chan *backend.StreamRead, 1)
	go func() {
		r, err := e.d.TailStream(e.ctx, &backend.TailStreamParams{ReadStreamParams: backend.ReadStreamParams{
			ExecutionID: c.ExecutionID, AttemptIndex: c.Fence.AttemptIndex, Count: 10}, Block: 30 * time.Second})
		if err != nil {
			e.t.Errorf("blocking tail: %v", err)
		}
		got <- r
	}()
	id := e.appendFrame(c, "", "first")
	var r *backend.StreamRead
	select {
	case r = <-got:
	case <-e.ctx.Done():
		e.t.Fatal("the blocking tail did not return the appended frame")
	}
	if r == nil || len(r.Frames) != 1 || r.Frames[0].ID != id || r.Frames[0].Fields["payload"] != "first" || r.Closed {
		e.t.Fatalf("blocking tail: %+v, want frame %s", r, id)
	}
	if r := e.tail(c, id, 20*time.Millisecond); len(r.Frames) != 0 || r.Closed {
		e.t.Fatalf("tail after the last frame: %+v", r)
	}
	e.complete(c, nil)
	if r := e.tail(c, id, 20*time.Millisecond); !r.Closed || len(r.Frames) != 0 {
		e.t.Fatalf("tail after complete: %+v, want closed", r)
	}
	_, err := e.d.TailStream(e.ctx, &backend.TailStreamParams{ReadStreamParams: backend.ReadStreamParams{
		ExecutionID: c.ExecutionID, Count: 10}})
	wantErr(e.t, "tail without a block", err, backend.ErrInvalidInput)
	_, err = e.d.TailStream(e.ctx, &backend.TailStreamParams{ReadStreamParams: backend.ReadStreamParams{
		ExecutionID: "not-an-id", Count: 10}, Block: time.Millisecond})
	wantErr(e.t, "tail a malformed id", err, backend.ErrInvalidInput)
}

// testReadSummary: no summary reads as ("", 0); each summary frame is
// merged into the document (a JSON merge patch) and counted.
func testReadSummary(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	read := func() *backend.Summary {
		e.t.Helper()
		s, err := e.d.ReadSummary(e.ctx, &backend.ReadSummaryParams{ExecutionID: c.ExecutionID, AttemptIndex: c.Fence.AttemptIndex})
		if err != nil {
			e.t.Fatal(err)
		}
		return s
	}
	if s := read(); s.Document != "" || s.Version != 0 {
		e.t.Fatalf("summary before any summary frame: %+v", s)
	}
	e.appendFrame(c, backend.FrameSummary, `{"a":1,"b":{"c":"x"}}`)
	e.appendFrame(c, backend.FrameDurable, `not a patch`)
	e.appendFrame(c, backend.FrameSummary, `{"b":{"d":2}}`)
	s := read()
	var doc map[string]any
	if err := json.Unmarshal([]byte(s.Document), &doc); err != nil {
		e.t.Fatalf("summary document %q: %v", s.Document, err)
	}
	want := map[string]any{"a": 1.0, "b": map[string]any{"c": "x", "d": 2.0}}
	if s.Version != 2 || !reflect.DeepEqual(doc, want) {
		e.t.Fatalf("summary: version %d document %v, want 2 %v", s.Version, doc, want)
	}
	_, err := e.d.ReadSummary(e.ctx, &backend.ReadSummaryParams{ExecutionID: "not-an-id"})
	wantErr(e.t, "read the summary of a malformed id", err, backend.ErrInvalidInput)
	e.complete(c, nil)
}

// testResumeSignals: the signal that resumed an attempt is read back by
// the resumed attempt (with its payload); a first run and another
// attempt index read none.
func testResumeSignals(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	read := func(attempt int) []backend.ResumeSignal {
		e.t.Helper()
		sigs, err := e.d.ResumeSignals(e.ctx, &backend.ResumeSignalsParams{ExecutionID: c.ExecutionID, AttemptIndex: attempt})
		if err != nil {
			e.t.Fatal(err)
		}
		return sigs
	}
	if sigs := read(c.Fence.AttemptIndex); len(sigs) != 0 {
		e.t.Fatalf("resume signals of a first run: %+v", sigs)
	}
	s := e.suspend(c, false, "go")
	if _, err := e.signal(c.ExecutionID, s, "other"); err != nil {
		e.t.Fatal(err)
	}
	r, err := e.signal(c.ExecutionID, s, "go")
	if err != nil || r.Effect != backend.EffectResumed {
		e.t.Fatalf("the resuming signal: %+v %v", r, err)
	}
	n := e.mustClaim()
	sigs := read(n.Fence.AttemptIndex)
	if len(sigs) != 1 || sigs[0].ID != r.SignalID || sigs[0].Name != "go" || sigs[0].WaitpointID != s.WaitpointID ||
		string(sigs[0].Payload) != `{"ok":true}` || sigs[0].AcceptedAt <= 0 {
		e.t.Fatalf("resume signals: %+v, want signal %s (go) on %s", sigs, r.SignalID, s.WaitpointID)
	}
	if sigs := read(n.Fence.AttemptIndex + 1); len(sigs) != 0 {
		e.t.Fatalf("resume signals of another attempt: %+v", sigs)
	}
	_, err = e.d.ResumeSignals(e.ctx, &backend.ResumeSignalsParams{ExecutionID: "not-an-id"})
	wantErr(e.t, "resume signals of a malformed id", err, backend.ErrInvalidInput)
	e.complete(n, nil)
}

// testResumeSignalsPending: after a suspend that a pending waitpoint's
// buffered signal already satisfied, the waitpoint's satisfiers read
// back as that signal, or ErrUnsupported where the backend keeps none.
func testResumeSignalsPending(e *env) {
	e.create(e.spec())
	c := e.mustClaim()
	wp, err := e.pending(c, c.Fence)
	if err != nil {
		e.t.Fatal(err)
	}
	sent := e.signalTo(c.ExecutionID, *wp, "callback", "")
	p := e.suspendParams(c, false, "callback")
	p.PendingWaitpointID = wp.ID
	s, err := e.d.SuspendExecution(e.ctx, p)
	if err != nil || !s.AlreadySatisfied {
		e.t.Fatalf("suspend on a satisfied pending waitpoint: %+v %v", s, err)
	}
	sigs, err := e.d.ResumeSignals(e.ctx, &backend.ResumeSignalsParams{ExecutionID: c.ExecutionID,
		AttemptIndex: c.Fence.AttemptIndex, WaitpointID: wp.ID})
	switch {
	case errors.Is(err, backend.ErrUnsupported):
	case err != nil:
		e.t.Fatal(err)
	case len(sigs) != 1 || sigs[0].ID != sent.SignalID || sigs[0].Name != "callback":
		e.t.Fatalf("satisfiers of the pending waitpoint: %+v, want signal %s", sigs, sent.SignalID)
	}
	e.complete(c, nil)
}

// attemptUnmigrated are RunUnmigrated's cases of the AttemptReadDriver
// operations.
func attemptUnmigrated(ctx context.Context, d backend.Driver, id model.ExecutionID) map[string]func() error {
	return map[string]func() error{
		"TailStream": func() error {
			_, err := d.TailStream(ctx, &backend.TailStreamParams{ReadStreamParams: backend.ReadStreamParams{
				ExecutionID: id, Count: 1}, Block: time.Millisecond})
			return err
		},
		"ReadSummary": func() error {
			_, err := d.ReadSummary(ctx, &backend.ReadSummaryParams{ExecutionID: id})
			return err
		},
		"ResumeSignals": func() error {
			_, err := d.ResumeSignals(ctx, &backend.ResumeSignalsParams{ExecutionID: id})
			return err
		},
	}
}
