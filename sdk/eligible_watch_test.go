package sdk_test

import (
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

// TestWorkerFindsNotifiedWork: with notifications up and a frozen clock,
// ClaimNext reads no window after its first (the next is never due), so
// the only way it can find an execution created afterwards is the ZADD
// keyevent naming that execution's partition.
func TestWorkerFindsNotifiedWork(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	frozen := time.Now()
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "notified", Lanes: []string{"notified"}, LeaseTTL: time.Minute,
		Clock: func() time.Time { return frozen }})
	valkeytest.Eventually(t, 30*time.Second, "notifications up", w.NotificationsUp)
	if l, err := w.ClaimNext(b.ctx); err != nil || l != nil {
		t.Fatalf("first ClaimNext on an empty lane: lease %v, err %v", l, err)
	}
	id := b.create(t, sdk.ExecutionSpec{Lane: "notified", Payload: []byte("x")})
	var got *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "the notified execution claimed", func() bool {
		l, err := w.ClaimNext(b.ctx)
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

// TestWorkerWithoutNotificationsPolls: the same worker with
// DisableNotifications finds the execution by reading windows.
func TestWorkerWithoutNotificationsPolls(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "polling", Lanes: []string{"polling"}, LeaseTTL: time.Minute,
		DisableNotifications: true})
	if w.NotificationsUp() {
		t.Fatal("notifications up with DisableNotifications")
	}
	id := b.create(t, sdk.ExecutionSpec{Lane: "polling", Payload: []byte("x")})
	var got *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "the execution claimed by polling", func() bool {
		l, err := w.ClaimNext(b.ctx)
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

// TestWorkersOfOneClientShareOneSubscription: every ZADD of the database
// is published to every subscriber of its keyevent channel, so workers of
// one client hold one subscription between them (not one each), all of
// them up while it is, and it ends with the last worker.
func TestWorkersOfOneClientShareOneSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	channel, err := b.vc.ZaddKeyeventChannel(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := b.vc.Raw()
	subscribers := func() int64 {
		m, err := raw.Do(b.ctx, raw.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
		if err != nil {
			t.Fatal(err)
		}
		return m[channel]
	}
	ws := make([]*sdk.Worker, 3)
	for i := range ws {
		w, err := sdk.Connect(b.ctx, b.vc, sdk.WorkerConfig{WorkerID: "shared", Lanes: []string{"shared"}, LeaseTTL: time.Minute,
			Logger: valkeytest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	valkeytest.Eventually(t, 30*time.Second, "every worker's notifications up", func() bool {
		for _, w := range ws {
			if !w.NotificationsUp() {
				return false
			}
		}
		return true
	})
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscriptions to %s for 3 workers of one client, want 1", n, channel)
	}
	// A notified execution wakes the workers: each finds it (one claims).
	id := b.create(t, sdk.ExecutionSpec{Lane: "shared", Payload: []byte("x")})
	var got *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "the execution claimed", func() bool {
		l, err := ws[2].ClaimNext(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = l
		return l != nil
	})
	if got.ID != id {
		t.Fatalf("claimed %s, want %s", got.ID, id)
	}
	if err := got.Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := ws[0].Close(b.ctx); err != nil {
		t.Fatal(err)
	}
	if ws[0].NotificationsUp() || !ws[1].NotificationsUp() {
		t.Fatal("a closed worker still up, or the others down with it")
	}
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscriptions after one of 3 workers closed, want 1", n)
	}
	for _, w := range ws[1:] {
		if err := w.Close(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	valkeytest.Eventually(t, 30*time.Second, "the subscription ended with the last worker", func() bool { return subscribers() == 0 })
}
