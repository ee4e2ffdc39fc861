package sdk_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

// TestStreamModesAndTail: a tailing reader blocked on an attempt's stream
// gets frames as they are appended and sees the stream closed when the
// attempt ends; summary frames merge into the summary document;
// best-effort frames are appended; bad modes are refused.
func TestStreamModesAndTail(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	id := b.create(t, sdk.ExecutionSpec{Lane: "stream", Kind: "llm"})
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"stream"}})
	var l *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool { l = b.claim(t, w); return l != nil })

	type tailed struct {
		frames []sdk.StreamFrame
		closed bool
		err    error
	}
	tail := make(chan tailed, 1)
	go func() {
		var out tailed
		after := ""
		for !out.closed {
			fs, closed, err := b.c.TailAttemptStream(b.ctx, id, 0, after, 2*time.Second, 100)
			if err != nil {
				out.err = err
				break
			}
			out.frames = append(out.frames, fs...)
			if len(fs) > 0 {
				after = fs[len(fs)-1].ID
			}
			out.closed = closed && len(fs) == 0
		}
		tail <- out
	}()

	for _, f := range []sdk.Frame{
		{Type: "token", Payload: []byte("Hel")},
		{Type: "token", Payload: []byte("lo"), Mode: sdk.FrameBestEffort},
		{Type: "state", Payload: []byte(`{"step":1,"model":"m"}`), Mode: sdk.FrameSummary},
		{Type: "state", Payload: []byte(`{"step":2}`), Mode: sdk.FrameSummary},
	} {
		if _, err := l.AppendFrame(b.ctx, f); err != nil {
			t.Fatalf("append %+v: %v", f, err)
		}
	}
	for name, f := range map[string]sdk.Frame{
		"UnknownMode":    {Type: "x", Mode: "loud"},
		"SummaryNotJSON": {Type: "x", Payload: []byte("{"), Mode: sdk.FrameSummary},
	} {
		if _, err := l.AppendFrame(b.ctx, f); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	doc, version, err := b.c.ReadSummary(b.ctx, id, 0)
	var sum map[string]any
	if err != nil || version != 2 || json.Unmarshal([]byte(doc), &sum) != nil || len(sum) != 2 || sum["model"] != "m" || sum["step"] != 2.0 {
		t.Fatalf("summary = %q v%d, %v; want the merge {model: m, step: 2}", doc, version, err)
	}
	if err := l.Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	var got tailed
	select {
	case got = <-tail:
	case <-b.ctx.Done():
		t.Fatal("tail did not end after the attempt closed")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	var tokens string
	for _, f := range got.frames {
		if f.Fields["frame_type"] == "token" {
			tokens += f.Fields["payload"]
		}
	}
	if tokens != "Hello" || !got.closed {
		t.Fatalf("tailed tokens %q closed %v (%d frames)", tokens, got.closed, len(got.frames))
	}
	if _, _, err := b.c.TailAttemptStream(b.ctx, id, 0, "", 0, 10); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Fatalf("zero block: %v", err)
	}
}
