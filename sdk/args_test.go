package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// resizeArgs names its kind, as a River JobArgs does.
type resizeArgs struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (resizeArgs) Kind() string { return "image.resize" }

// TestArgsCarryTheirKind: EnqueueArgs stores the kind the argument type
// names, HandleArgs routes that kind to its typed handler, and Wait
// returns the completed state with the handler's result.
func TestArgsCarryTheirKind(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	defer b.c.Close() // stops Wait's watch
	ctx := b.ctx
	mux := sdk.NewMux()
	sdk.HandleArgs(mux, func(_ context.Context, job *sdk.Job, a resizeArgs) error {
		job.SetResult([]byte(a.Image + "@" + job.Kind))
		return nil
	})
	if k := mux.Kinds(); len(k) != 1 || k[0] != "image.resize" {
		t.Fatalf("kinds = %v", k)
	}
	id, err := sdk.EnqueueArgs(ctx, b.c, resizeArgs{Image: "cat.png", Width: 64}, sdk.WithLane("args"))
	if err != nil {
		t.Fatal(err)
	}
	if st := b.state(t, id); st.Kind != "image.resize" {
		t.Fatalf("stored kind %q", st.Kind)
	}
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "args", Lanes: []string{"args"}})
	stop := runWorker(t, ctx, w, mux.ServeJob)
	defer stop()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := b.c.Wait(wctx, id)
	if err != nil || st.PublicState != model.PublicCompleted {
		t.Fatalf("Wait: %+v %v", st, err)
	}
	if r := b.result(t, id); string(r) != "cat.png@image.resize" {
		t.Fatalf("result %q", r)
	}
}
