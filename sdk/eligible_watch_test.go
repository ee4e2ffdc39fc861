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
