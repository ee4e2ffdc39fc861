package sdk_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

// TestAttemptStreamBackends: on both backends a lease appends frames to
// its attempt's stream (durable, with a correlation id, and summary
// patches merged into the summary document), a reader reads them in
// order, from after an entry and a page at a time, a tail waiting for
// the next frame gets the one appended meanwhile, invalid frames are
// refused and write nothing, and the stream reads closed once the
// attempt completed.
func TestAttemptStreamBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 2*time.Minute)
			id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "st", Kind: "gen"})
			if err != nil {
				t.Fatal(err)
			}
			w := worker(sdk.WorkerConfig{WorkerID: "st", Lanes: []string{"st"}})
			l := claimOne(t, ctx, w)
			if l.ID != id {
				t.Fatalf("claimed %s, want %s", l.ID, id)
			}
			var ids []string
			for _, f := range []sdk.Frame{
				{Type: "token", Payload: []byte("Hel")},
				{Type: "token", Payload: []byte("lo"), CorrelationID: "c-1"},
				{Type: "progress", Payload: []byte(`{"pct":50,"stage":{"name":"a","n":1}}`), Mode: sdk.FrameSummary},
				{Type: "progress", Payload: []byte(`{"pct":100,"stage":{"n":null}}`), Mode: sdk.FrameSummary},
			} {
				e, err := l.AppendFrame(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, e)
			}
			if _, err := l.AppendFrame(ctx, sdk.Frame{Type: "s", Payload: []byte("{"), Mode: sdk.FrameSummary}); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("a summary frame that is not JSON: %v", err)
			}
			if _, err := l.AppendFrame(ctx, sdk.Frame{}); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("an untyped frame: %v", err)
			}

			frames, closed, err := c.ReadAttemptStream(ctx, id, l.AttemptIndex, "", 100)
			if err != nil || closed || len(frames) != 4 {
				t.Fatalf("read: %d frames closed=%v %v", len(frames), closed, err)
			}
			for i, f := range frames {
				if f.ID != ids[i] {
					t.Fatalf("frame %d id %s, want %s (%v)", i, f.ID, ids[i], ids)
				}
			}
			if frames[0].Fields["frame_type"] != "token" || frames[0].Fields["payload"] != "Hel" ||
				frames[1].Fields["payload"] != "lo" || frames[1].Fields["correlation_id"] != "c-1" {
				t.Fatalf("frame fields %v %v", frames[0].Fields, frames[1].Fields)
			}
			if page, _, err := c.ReadAttemptStream(ctx, id, l.AttemptIndex, ids[0], 1); err != nil || len(page) != 1 || page[0].ID != ids[1] {
				t.Fatalf("one frame after %s: %+v %v", ids[0], page, err)
			}
			if _, _, err := c.ReadAttemptStream(ctx, id, l.AttemptIndex, "", 0); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("read 0 frames: %v", err)
			}

			doc, version, err := c.ReadSummary(ctx, id, l.AttemptIndex)
			if err != nil || version != 2 {
				t.Fatalf("summary: %s version %d %v", doc, version, err)
			}
			var got any
			if err := json.Unmarshal([]byte(doc), &got); err != nil {
				t.Fatalf("summary %q: %v", doc, err)
			}
			want := map[string]any{"pct": float64(100), "stage": map[string]any{"name": "a"}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("summary %s, want %v", doc, want)
			}

			tailed := make(chan []sdk.StreamFrame, 1)
			tailErr := make(chan error, 1)
			go func() {
				fs, _, err := c.TailAttemptStream(ctx, id, l.AttemptIndex, ids[3], 30*time.Second, 10)
				tailErr <- err
				tailed <- fs
			}()
			last, err := l.AppendFrame(ctx, sdk.Frame{Type: "token", Payload: []byte("!")})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-tailErr; err != nil {
				t.Fatal(err)
			}
			if fs := <-tailed; len(fs) != 1 || fs[0].ID != last || fs[0].Fields["payload"] != "!" {
				t.Fatalf("tail after %s: %+v, want %s", ids[3], fs, last)
			}

			if err := l.Complete(ctx, nil); err != nil {
				t.Fatal(err)
			}
			frames, closed, err = c.ReadAttemptStream(ctx, id, l.AttemptIndex, "", 100)
			if err != nil || !closed || len(frames) != 5 {
				t.Fatalf("read after complete: %d frames closed=%v %v", len(frames), closed, err)
			}
			if fs, closed, err := c.TailAttemptStream(ctx, id, l.AttemptIndex, last, 100*time.Millisecond, 10); err != nil || !closed || len(fs) != 0 {
				t.Fatalf("tail of a closed stream: %+v closed=%v %v", fs, closed, err)
			}
		})
	}
}
