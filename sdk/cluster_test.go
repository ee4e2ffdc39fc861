package sdk_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestWorkerOnCluster: a worker on a 3-primary cluster registers (the
// registry keys span slots), subscribes to eligible-work notifications on
// every primary, and, with a frozen clock (so it reads no window after its
// first), claims executions created on each primary: each one only a
// notification from the node that owns its partition can reveal.
func TestWorkerOnCluster(t *testing.T) {
	t.Parallel()
	cl := valkeytest.SharedCluster(t)
	vc := valkeytest.ClusterClient(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	b := &testBundle{vc: vc, c: c, ctx: ctx}
	// One lane per primary: a solo execution lives on its lane's partition.
	lanes := make([]string, valkeytest.ClusterPrimaries)
	for i, found := 0, 0; found < len(lanes); i++ {
		lane := fmt.Sprintf("cl-%d", i)
		p := vc.Partitions().SoloPartition(lane)
		n, err := cl.NodeOf(ctx, model.KeysOn(p).LaneEligible(lane))
		if err != nil {
			t.Fatal(err)
		}
		if lanes[n] == "" {
			lanes[n], found = lane, found+1
		}
	}
	frozen := time.Now()
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "cluster", Lanes: lanes, LeaseTTL: time.Minute,
		Clock: func() time.Time { return frozen }})
	valkeytest.Eventually(t, 30*time.Second, "notifications up on every primary", w.NotificationsUp)
	if l, err := w.ClaimNext(ctx); err != nil || l != nil {
		t.Fatalf("first ClaimNext on empty lanes: lease %v, err %v", l, err)
	}
	for n, lane := range lanes {
		id := b.create(t, sdk.ExecutionSpec{Lane: lane, Payload: []byte("x")})
		var got *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, fmt.Sprintf("the execution on node %d claimed", n), func() bool {
			l, err := w.ClaimNext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = l
			return l != nil
		})
		if got.ID != id {
			t.Fatalf("claimed %s, want %s", got.ID, id)
		}
	}
}
