package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/internal/wasmgen"
)

// TestValidateStopsOnSIGTERM: `fabric plugins validate` of a file whose
// fabric_manifest recurses with no loop (rec(60)) exits within seconds of
// SIGTERM, saying why, well before its own 10 s deadline for the
// manifest. It ran for minutes and ignored the signal: the guest call
// could not be interrupted, and the GC waiting for it to stop the world
// froze the process, signal handling included.
func TestValidateStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads the child's CPU time in /proc")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	wasm, err := wasmgen.Recursive("recurse_manifest", wasmgen.InManifest, 60)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "recurse_manifest.wasm")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "plugins", "validate", "--cache-dir", filepath.Join(dir, "cache"), file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	// In the guest once it has spent 300 ms of CPU: compiling this
	// 400-byte module takes a few.
	if err := waitCPU(cmd.Process.Pid, 300*time.Millisecond, done); err != nil {
		t.Fatalf("%v; stderr: %s", err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after SIGTERM; stderr: %s", stderr.String())
	}
	var exit *exec.ExitError
	if took := time.Since(sent); !errors.As(err, &exit) || exit.ExitCode() != 1 || took > 5*time.Second {
		t.Fatalf("exited %s after SIGTERM: %v, want exit status 1 within 5s; stderr: %s", took, err, stderr.String())
	}
	if msg := stderr.String(); !strings.Contains(msg, "is not a valid plugin") || !strings.Contains(msg, "cancelled") {
		t.Fatalf("stderr does not say the validation was cancelled: %s", msg)
	}
}

// waitCPU waits until process pid has used cpu of CPU time (user plus
// system, from /proc/PID/stat), and fails if it exits first (done).
func waitCPU(pid int, cpu time.Duration, done <-chan error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return errors.Join(errors.New("the process exited before it ran the guest"), err)
		case <-tick.C:
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return err
		}
		// Fields after the command name: state is the first, utime and
		// stime the 12th and 13th, in clock ticks (USER_HZ, 100).
		_, rest, ok := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 13 {
			return errors.New("unexpected /proc stat: " + string(b))
		}
		utime, _ := strconv.Atoi(f[11])
		stime, _ := strconv.Atoi(f[12])
		if time.Duration(utime+stime)*10*time.Millisecond >= cpu {
			return nil
		}
	}
}
