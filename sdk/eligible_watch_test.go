package sdk_test

import (
	"context"
	"strconv"
	"strings"
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

// TestIdleWorkerDoesNotAskAnEmptyLaneAgain: once a fabric_claim_next
// found a lane empty, an idle worker with notifications up does not send
// another until a ZADD to the partition's eligible index is notified
// (every such call was an empty server call: an idle worker asked on
// every round of its idle sweep). The notified execution is then claimed.
func TestIdleWorkerDoesNotAskAnEmptyLaneAgain(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t) // commandstats of this test alone
	vc := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 30*time.Second)
	if _, err := vc.EnsureLibrary(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	raw := vc.Raw()
	claimNexts := func() int64 {
		s, err := raw.Do(ctx, raw.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(s, "cmdstat_fcall:calls=")
		if !ok {
			return 0
		}
		num, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(num, 10, 64)
		return n
	}
	frozen := time.Now() // the empty mark never ages out
	w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "idle", Lanes: []string{"idle"}, LeaseTTL: time.Minute,
		DisableReclaim: true, Clock: func() time.Time { return frozen }, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	valkeytest.Eventually(t, 30*time.Second, "notifications up", w.NotificationsUp)
	if l, err := w.ClaimNext(ctx); err != nil || l != nil {
		t.Fatalf("ClaimNext on an empty lane: lease %v, err %v", l, err)
	}
	before := claimNexts()
	for range 5 {
		if l, err := w.ClaimNext(ctx); err != nil || l != nil {
			t.Fatalf("ClaimNext on an empty lane: lease %v, err %v", l, err)
		}
	}
	if n := claimNexts() - before; n != 0 {
		t.Fatalf("5 idle ClaimNext calls sent %d FCALLs to a lane known empty", n)
	}
	id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "idle", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	var got *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "the notified execution claimed", func() bool {
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
