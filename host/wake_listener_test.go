package host

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// TestWakeListenerService: the wake service routes every ZADD's key once
// subscribed, reports Up while the subscription lives, resubscribes (and
// calls resumed again) after its connection is killed, and stops down.
func TestWakeListenerService(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t) // its own server: the test kills pub/sub connections
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, time.Minute)

	var mu sync.Mutex
	var keys []string
	var resumed atomic.Int32
	w := &wakeListener{src: c, configSet: true, retry: 10 * time.Millisecond, logger: valkeytest.Logger(),
		route: func(k string) {
			mu.Lock()
			keys = append(keys, k)
			mu.Unlock()
		},
		resumed: func() { resumed.Add(1) }}
	if w.Up() {
		t.Fatal("up before Start")
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	<-w.Started()
	valkeytest.Eventually(t, 30*time.Second, "subscribed", func() bool { return w.Up() && resumed.Load() == 1 })

	routed := func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			if k == key {
				return true
			}
		}
		return false
	}
	zadd := func(key string) {
		r := c.Raw()
		if err := r.Do(ctx, r.B().Zadd().Key(key).ScoreMember().ScoreMember(1, "m").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	zadd("ff:idx:{fp:3}:lane:a:delayed")
	valkeytest.Eventually(t, 30*time.Second, "first key routed", func() bool { return routed("ff:idx:{fp:3}:lane:a:delayed") })

	r := c.Raw()
	if err := r.Do(ctx, r.B().ClientKill().TypePubsub().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	valkeytest.Eventually(t, 30*time.Second, "resubscribed", func() bool { return w.Up() && resumed.Load() >= 2 })
	zadd("ff:idx:{fp:4}:lane:a:delayed")
	valkeytest.Eventually(t, 30*time.Second, "key routed after resubscribing", func() bool { return routed("ff:idx:{fp:4}:lane:a:delayed") })

	w.Stop()
	w.Stop()
	if w.Up() {
		t.Fatal("up after Stop")
	}
	var none *wakeListener
	if none.Up() {
		t.Fatal("a host without timers reports wake-ups flowing")
	}
}
