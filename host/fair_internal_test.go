package host

import (
	"context"
	"testing"
	"time"
)

// running is how many calls of the class hold a turn.
func running(s *scheduler, probation bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if probation {
		return s.probRunning
	}
	return s.healthyRunning
}

func acquireAsync(s *scheduler, ctx context.Context, probation bool) <-chan *hold {
	ch := make(chan *hold, 1)
	go func() { ch <- s.acquire(ctx, probation, false) }()
	return ch
}

// waitQueued waits until the scheduler holds n healthy and m probation
// waiters.
func waitQueued(t *testing.T, s *scheduler, n, m int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		h, p := len(s.healthyQ), len(s.probQ)
		s.mu.Unlock()
		if h == n && p == m {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queues %d healthy, %d probation; want %d, %d", h, p, n, m)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSchedulerClasses: a probation call never holds a healthy slot, and
// is admitted only while no healthy call waits; waiters of a class are
// served in arrival order; a waiter whose context ends leaves the queue.
// (Admission is decided under the lock, in acquire and release.)
func TestSchedulerClasses(t *testing.T) {
	ctx := context.Background()
	s := newScheduler(1, 1, 0)

	// Probation slot held: a healthy call still starts at once.
	prob := s.acquire(ctx, true, false)
	healthy := s.acquire(ctx, false, false)
	if prob == nil || healthy == nil {
		t.Fatal("acquire with free slots failed")
	}
	// Both classes full: a healthy and two probation calls wait.
	h1 := acquireAsync(s, ctx, false)
	waitQueued(t, s, 1, 0)
	p1 := acquireAsync(s, ctx, true)
	waitQueued(t, s, 1, 1)
	p2 := acquireAsync(s, ctx, true)
	waitQueued(t, s, 1, 2)

	// The probation slot frees while a healthy call waits: no probation
	// call starts.
	s.release(prob)
	if n := running(s, true); n != 0 {
		t.Fatalf("%d probation calls started while a healthy call waited", n)
	}
	// A new probation call does not take the free slot either.
	cctx, cancel := context.WithCancel(ctx)
	p3 := acquireAsync(s, cctx, true)
	waitQueued(t, s, 1, 3)
	// The healthy slot frees: the healthy waiter starts, then (no healthy
	// call waits) the first probation waiter.
	s.release(healthy)
	hh := <-h1
	if hh == nil {
		t.Fatal("healthy waiter not admitted")
	}
	ph := <-p1
	if ph == nil {
		t.Fatal("first probation waiter not admitted")
	}
	if n := running(s, true); n != 1 {
		t.Fatalf("%d probation calls run with ProbationCalls 1", n)
	}
	// p3 gives up: it leaves the queue, and p2 is next.
	cancel()
	if h := <-p3; h != nil {
		t.Fatal("a cancelled waiter was admitted")
	}
	waitQueued(t, s, 0, 1)
	s.release(ph)
	s.release(ph) // a second release is a no-op
	ph2 := <-p2
	if ph2 == nil {
		t.Fatal("second probation waiter not admitted")
	}
	s.release(ph2)
	s.release(hh)
	if h, p := running(s, false), running(s, true); h != 0 || p != 0 {
		t.Fatalf("running %d healthy, %d probation after every release", h, p)
	}
}

// TestSchedulerDemotes: a healthy call that runs past demoteAfter gives
// its slot to the next healthy call and holds a probation slot, so no
// probation call starts beside it.
func TestSchedulerDemotes(t *testing.T) {
	ctx := context.Background()
	s := newScheduler(1, 1, 20*time.Millisecond)
	long := s.acquire(ctx, false, false)
	next := acquireAsync(s, ctx, false)
	h := <-next // admitted once long is demoted
	if h == nil {
		t.Fatal("healthy waiter not admitted after the long call was demoted")
	}
	if n := running(s, true); n != 1 {
		t.Fatalf("the demoted call does not count as a probation call: %d", n)
	}
	p := acquireAsync(s, ctx, true)
	waitQueued(t, s, 0, 1)
	s.release(long)
	if ph := <-p; ph == nil {
		t.Fatal("probation waiter not admitted once the demoted call returned")
	}
	s.release(h) // h may itself have been demoted meanwhile
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.healthyRunning != 0 || s.probRunning != 1 {
		t.Fatalf("running %d healthy, %d probation; want 0, 1", s.healthyRunning, s.probRunning)
	}
}

// TestProbationTimeout: the cut of a call on probation of a plugin that
// never returned is the base, doubled every second consecutive fault,
// never above the grant; a plugin that returned keeps its grant.
func TestProbationTimeout(t *testing.T) {
	var f fairState
	grant := 30 * time.Second
	for _, tc := range []struct {
		slowest time.Duration
		n       int
		want    time.Duration
	}{
		{0, 1, time.Second},
		{0, 2, time.Second},
		{0, 3, 2 * time.Second},
		{0, 5, 4 * time.Second},
		{0, 7, 8 * time.Second},
		{0, 8, time.Second}, // restarts with the backoff
		{time.Millisecond, 1, grant},
	} {
		f.reset()
		if tc.slowest > 0 {
			f.sawSuccess(tc.slowest)
		}
		if got := f.probationTimeout(time.Second, grant, tc.n); got != tc.want {
			t.Errorf("slowest %s, %d faults: cut %s, want %s", tc.slowest, tc.n, got, tc.want)
		}
	}
}

// TestProbationProvenFirst: on probation, a plugin whose version returned
// before waits ahead of those that never did.
func TestProbationProvenFirst(t *testing.T) {
	ctx := context.Background()
	s := newScheduler(1, 1, 0)
	held := s.acquire(ctx, true, false)
	unproven := acquireAsync(s, ctx, true)
	waitQueued(t, s, 0, 1)
	ch := make(chan *hold, 1)
	go func() { ch <- s.acquire(ctx, true, true) }()
	waitQueued(t, s, 0, 2)
	s.release(held)
	first := <-ch
	if first == nil {
		t.Fatal("the proven waiter was not admitted first")
	}
	s.release(first)
	if h := <-unproven; h == nil {
		t.Fatal("the unproven waiter was not admitted next")
	}
}
