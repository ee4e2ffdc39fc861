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
		return c.ServerTimeMicros(ctx)
	}, 200*time.Millisecond)
	sc.tight = time.Hour // one read per refresh however loaded the machine (TestServerClockSlowReadKeptBriefly)
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
	sc := newServerClock(msReader(func(context.Context) (int64, error) {
		if fail {
			return 0, errors.New("down")
		}
		return 42_000, nil
	}), time.Hour)
	if _, err := sc.Now(context.Background()); err == nil {
		t.Fatal("no error")
	}
	fail = false
	if v, err := sc.Now(context.Background()); err != nil || v < 42_000 || v > 42_100 {
		t.Fatalf("Now = %d, %v", v, err)
	}
}

// The reading keeps its microseconds: read at 1000.999 ms, the clock
// answers 1000 and reads 1001 one microsecond after the reply arrived,
// not a millisecond later (When), and at When(ms) it answers ms.
func TestServerClockKeepsMicroseconds(t *testing.T) {
	t.Parallel()
	sc := newServerClock(func(context.Context) (int64, error) { return 1_000_999, nil }, time.Hour)
	if _, ok := sc.When(1001); ok {
		t.Fatal("When answered before the first reading")
	}
	v, err := sc.Now(context.Background())
	if err != nil || v != 1000 {
		t.Fatalf("Now = %d, %v; want 1000", v, err)
	}
	at, ok := sc.When(1001)
	if !ok {
		t.Fatal("When(1001) unknown after a reading")
	}
	if got := at.Sub(sc.at); got != time.Microsecond {
		t.Fatalf("When(1001) is %s after the reading; want 1µs", got)
	}
	if got := mustWhen(t, sc, 1050).Sub(sc.at); got != 49*time.Millisecond+time.Microsecond {
		t.Fatalf("When(1050) is %s after the reading; want 49.001ms", got)
	}
	for _, ms := range []int64{1001, 1005} {
		time.Sleep(time.Until(mustWhen(t, sc, ms)))
		if v, _ := sc.Now(context.Background()); v < ms {
			t.Fatalf("at When(%d) Now answers %d", ms, v)
		}
	}
}

func mustWhen(t *testing.T, sc *serverClock, ms int64) time.Time {
	t.Helper()
	at, ok := sc.When(ms)
	if !ok {
		t.Fatalf("When(%d) unknown", ms)
	}
	return at
}

// A reading whose round trip took longer than serverClockTightRTT is kept
// for a twentieth of the refresh, a quick one for the whole refresh.
func TestServerClockSlowReadKeptBriefly(t *testing.T) {
	t.Parallel()
	slow := true
	sc := newServerClock(func(context.Context) (int64, error) {
		if slow {
			time.Sleep(2 * serverClockTightRTT)
		}
		return 5_000_000, nil
	}, time.Hour)
	if _, err := sc.Now(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sc.keep != time.Hour/20 {
		t.Fatalf("slow reading kept %s; want %s", sc.keep, time.Hour/20)
	}
	slow = false
	sc.at = sc.at.Add(-time.Hour / 20) // its keep spent: the next Now reads again
	if _, err := sc.Now(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sc.keep != time.Hour {
		t.Fatalf("quick reading kept %s; want %s", sc.keep, time.Hour)
	}
}

// With the default server clock on the real clock, a reported next due
// time becomes the timer's due time exactly (no margin: When), and an
// item the wake probe finds due now is scanned.
func TestDueTimeIsServerClockWhen(t *testing.T) {
	t.Parallel()
	sc := newServerClock(func(context.Context) (int64, error) { return 7_000_250, nil }, time.Hour)
	if _, err := sc.Now(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := &plugin{h: &Host{cfg: Config{serverClock: sc, Clock: systemClock{}}}}
	got, ok := p.dueTime(7_010)
	if want := mustWhen(t, sc, 7_010); !ok || !got.Equal(want) {
		t.Fatalf("dueTime(7010) = %v, %v; want %v", got, ok, want)
	}
	if got.Sub(sc.at) != 9750*time.Microsecond {
		t.Fatalf("dueTime(7010) is %s after the reading; want 9.75ms", got.Sub(sc.at))
	}
}
