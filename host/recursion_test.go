package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/wasmgen"
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
	t.Logf("in a child process:\n%s", out)
	return false
}

// recursiveFile writes wasmgen.Recursive(name, at, depth) into a
// directory of the test's and returns its path.
func recursiveFile(t *testing.T, name string, at wasmgen.Where, depth int32) string {
	t.Helper()
	b, err := wasmgen.Recursive(name, at, depth)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".wasm")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRecursiveScanIsCutWhileTheGCRuns: a scan calling rec(60) (no loop
// anywhere) ends at its deadline as a timeout, and the GC, run over and
// over meanwhile, stops the world within a second each time. Without the
// checks at function entries the first collection waits for the guest
// forever, and the whole process with it (hence the child process).
func TestRecursiveScanIsCutWhileTheGCRuns(t *testing.T) {
	if !inChild(t, time.Minute) {
		return
	}
	ctx := context.Background()
	for _, interpret := range []bool{false, true} {
		lc := benchLoader(t, wazero.NewCompilationCache())
		lc.interpret = interpret
		m, err := loadModule(ctx, recursiveFile(t, "recurse_scan", wasmgen.InScan, 60), lc)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(ctx)
		const timeout = 2 * time.Second
		cctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w: test scan after %s", ErrTimeout, timeout))
		defer cancel()
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := m.call(cctx, abi.ExportScan, scanInput(50), m.fns(m, ""), nil)
			done <- err
		}()
		gcs := 0
		for time.Since(start) < timeout/2 {
			gc := time.Now()
			runtime.GC()
			if d := time.Since(gc); d > time.Second {
				t.Errorf("interpreter %v: a collection took %s during the scan", interpret, d)
			}
			gcs++
		}
		select {
		case err := <-done:
			t.Fatalf("interpreter %v: the scan ended before its deadline, after %s: %v", interpret, time.Since(start), err)
		default:
		}
		err = <-done
		if took := time.Since(start); FaultKind(err) != FaultTimeout || took > timeout+time.Second {
			t.Fatalf("interpreter %v: the scan ended after %s with %v, want a timeout at %s", interpret, took, err, timeout)
		}
		t.Logf("interpreter %v: %d collections during the scan; it ended with: %v", interpret, gcs, err)
	}
}

// TestInspectRecursionAtLoad: a file whose fabric_manifest, _initialize
// or start function recurses with no loop fails Inspect (as `fabric
// plugins validate` and a host's load) with a timeout at the deadline of
// its context; the same file recursing to depth 3 is a valid plugin.
// Without the checks at function entries Inspect never returned.
func TestInspectRecursionAtLoad(t *testing.T) {
	if !inChild(t, time.Minute) {
		return
	}
	for _, at := range []wasmgen.Where{wasmgen.InManifest, wasmgen.InInitialize, wasmgen.InStart} {
		if _, err := Inspect(context.Background(), recursiveFile(t, "shallow", at, 3), InspectConfig{}); err != nil {
			t.Fatalf("%s: rec(3): %v", at, err)
		}
		const timeout = 2 * time.Second
		ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, fmt.Errorf("%w: test inspect after %s", ErrTimeout, timeout))
		start := time.Now()
		_, err := Inspect(ctx, recursiveFile(t, "deep", at, 60), InspectConfig{})
		cancel()
		if took := time.Since(start); !errors.Is(err, ErrTimeout) || RejectReason(err) != RejectFault || took > timeout+2*time.Second {
			t.Fatalf("%s: rec(60): Inspect returned after %s: %v (%s), want a timeout at %s", at, took, err, RejectReason(err), timeout)
		}
	}
}
