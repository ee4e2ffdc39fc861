// Package testbackend is what the two drivers' test helpers
// (backend/valkey/valkeytest, backend/postgres/pgtest) share, written
// once: the tests' logger, a context that ends with the test, and the
// poll-with-deadline tests use instead of sleeping.
package testbackend

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// Logger returns a logger for tests: silent unless FABRIC_TEST_LOG is
// set, then debug on stderr.
func Logger() *slog.Logger {
	if os.Getenv("FABRIC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Context returns a context that ends with the test (and after at most d).
func Context(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every few milliseconds until it returns true or
// d passes, then fails the test with who and msg.
func Eventually(tb testing.TB, who string, d time.Duration, msg string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not true within %s: %s", who, d, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
