package host

import (
	"context"
	"errors"
	"testing"
)

// TestInspectCancelledCompilesNothing: a load whose context is done
// (the CLI got SIGTERM, the host is stopping) returns at once without
// compiling: wazero's compile does not watch the context, and `fabric
// plugins prewarm` or `plugins list` went on compiling every file left,
// seconds each, after the signal.
func TestInspectCancelledCompilesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	path := benchFixture(t, "healthy")
	if _, err := Inspect(ctx, path, InspectConfig{CacheDir: dir}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Inspect with its context done: %v, want %v", err, context.Canceled)
	}
	if held, err := CacheHolds(dir, path, true); err != nil || held {
		t.Fatalf("the cache holds the module (%v, %v): it was compiled", held, err)
	}
}
