package host

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// The estimate is never ahead of the server's TIME read after it, stays
// close to it, never goes backwards, and costs one TIME per refresh.
func TestServerClockNeverAheadOfServer(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	var reads atomic.Int64
	sc := newServerClock(func(ctx context.Context) (int64, error) {
		reads.Add(1)
		return c.ServerTime(ctx)
	}, 200*time.Millisecond)
	var prev int64
	start := time.Now()
	n := 0
	for time.Since(start) < 700*time.Millisecond {
		est, err := sc.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		real, err := c.ServerTime(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if est > real {
			t.Fatalf("estimate %d is ahead of the server's %d", est, real)
		}
		if real-est > 1000 { // one refresh plus round trips on a loaded machine
			t.Fatalf("estimate %d trails the server's %d by %d ms", est, real, real-est)
		}
		if est < prev {
			t.Fatalf("estimate went back from %d to %d", prev, est)
		}
		prev = est
		n++
	}
	// 700 ms at a 200 ms refresh: 4 reads, give or take scheduling.
	if r := reads.Load(); r < 2 || r > 8 || int64(n) < 10*r {
		t.Fatalf("%d TIME reads for %d answers", r, n)
	}
}

// A failed read is returned, not cached.
func TestServerClockReadError(t *testing.T) {
	t.Parallel()
	fail := true
	sc := newServerClock(func(context.Context) (int64, error) {
		if fail {
			return 0, errors.New("down")
		}
		return 42_000, nil
	}, time.Hour)
	if _, err := sc.Now(context.Background()); err == nil {
		t.Fatal("no error")
	}
	fail = false
	if v, err := sc.Now(context.Background()); err != nil || v < 42_000 || v > 42_100 {
		t.Fatalf("Now = %d, %v", v, err)
	}
}
