package sdk_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestEnqueueMany: a batch is created in one call with every spec's
// options; a reused idempotency key inside the batch yields the first
// execution; a worker runs them all.
func TestEnqueueMany(t *testing.T) {
	t.Parallel()
	b := setup(t, 16)
	var specs []sdk.ExecutionSpec
	for i := range 20 {
		s, err := sdk.BuildSpec("resize", []byte(strconv.Itoa(i)), sdk.WithLane("images"), sdk.WithPriority(i%3),
			sdk.WithIdempotencyKey("img-"+strconv.Itoa(i)), sdk.WithTag("app.n", strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	dup, _ := sdk.BuildSpec("resize", []byte("again"), sdk.WithLane("images"), sdk.WithIdempotencyKey("img-3"))
	later, _ := sdk.BuildSpec("resize", nil, sdk.WithLane("images"), sdk.WithDelay(time.Hour))
	specs = append(specs, dup, later)
	ids, err := b.c.EnqueueMany(b.ctx, specs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 22 || ids[20] != ids[3] {
		t.Fatalf("ids: %d returned, duplicate key gave %s, first %s", len(ids), ids[20], ids[3])
	}
	seen := map[model.ExecutionID]bool{}
	for i, id := range ids[:20] {
		if id == "" || seen[id] {
			t.Fatalf("id %d = %q (repeated or empty)", i, id)
		}
		seen[id] = true
		if s := b.state(t, id); s.Lane != "images" || s.Fields["priority"] != strconv.Itoa(i%3) || s.PublicState != model.PublicWaiting {
			t.Fatalf("execution %d: %+v", i, s.Fields)
		}
	}
	if s := b.state(t, ids[21]); s.PublicState != model.PublicDelayed {
		t.Fatalf("delayed spec: state %s", s.PublicState)
	}

	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"images"}})
	got := map[string]bool{}
	valkeytest.Eventually(t, 30*time.Second, "all twenty claimed", func() bool {
		if l := b.claim(t, w); l != nil {
			got[string(l.Payload)] = true
			if err := l.Complete(b.ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		return len(got) == 20
	})
	if got["again"] {
		t.Fatal("the duplicate key's payload was stored")
	}
}

// TestEnqueueManyBadInputFailsBeforeNetwork: one invalid spec refuses the
// whole batch, on a client whose connection is closed.
func TestEnqueueManyBadInputFailsBeforeNetwork(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	vc := valkeytest.Dial(t, valkeytest.Server(t).URL(), 0)
	c, err := sdk.NewClient(b.ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	vc.Close()
	good := sdk.ExecutionSpec{Lane: "l", Kind: "k"}
	for name, specs := range map[string][]sdk.ExecutionSpec{
		"BadPriority":  {good, {Lane: "l", Kind: "k", Priority: 9001}},
		"EmptyLane":    {{Kind: "k"}, good},
		"TooMany":      make([]sdk.ExecutionSpec, sdk.MaxEnqueueBatch+1),
		"BadTagInside": {good, good, {Lane: "l", Tags: map[string]string{"": "v"}}},
	} {
		ids, err := c.EnqueueMany(b.ctx, specs...)
		if !errors.Is(err, sdk.ErrInvalidInput) || ids != nil {
			t.Errorf("%s: %v %v", name, ids, err)
		}
	}
}
