package host

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// childEnv names the test a child process of the test binary runs
// (inChild).
const childEnv = "FABRIC_TEST_CHILD"

// inChild runs the calling test again in a child process of the test
// binary, and fails it when the child fails or has not ended within
// limit (it is killed). A guest call the host cannot interrupt freezes
// the process that makes it (the GC waits for it to stop the world:
// timers, the test's own deadline and t.Fatal included), so only another
// process can tell. It returns true in the child, which runs the test's
// body; false in the parent, which has nothing left to do.
func inChild(t *testing.T, limit time.Duration) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the test process froze: killed after %s; its output:\n%s", limit, out)
	}
	if err != nil {
		t.Fatalf("in a child process: %v; its output:\n%s", err, out)
	}
	return false
}
