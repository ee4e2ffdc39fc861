// Package testsignal lets production code announce the edges tests must
// observe (a batch done, a plugin swapped) without sleeps: a TestSignal's
// zero value is a no-op; a test calls Init and then waits on it.
package testsignal

import (
	"testing"
	"time"
)

// WaitTimeout is how long WaitOrTimeout waits.
const WaitTimeout = 10 * time.Second

// TestSignal is a buffered announcement of values of type T.
type TestSignal[T any] struct{ ch chan T }

// Init arms the signal; until then Signal does nothing.
func (s *TestSignal[T]) Init() { s.ch = make(chan T, 1024) }

// Signal announces v; it never blocks (a full buffer drops v).
func (s *TestSignal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// WaitOrTimeout returns the next value or fails the test after
// WaitTimeout.
func (s *TestSignal[T]) WaitOrTimeout(tb testing.TB) T {
	tb.Helper()
	if s.ch == nil {
		tb.Fatal("testsignal: WaitOrTimeout on a signal that was not Init")
	}
	select {
	case v := <-s.ch:
		return v
	case <-time.After(WaitTimeout):
		tb.Fatalf("testsignal: no signal within %s", WaitTimeout)
	}
	var zero T
	return zero
}

// C returns the channel, for select loops in tests.
func (s *TestSignal[T]) C() <-chan T { return s.ch }
