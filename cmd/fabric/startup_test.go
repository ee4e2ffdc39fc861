package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRunPipeClosedAtStartup: `fabric run | head -25` whose reader is
// gone before the run is up exits 0, as it does once running, not 1 with
// "context canceled".
func TestRunPipeClosedAtStartup(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first line
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd := exec.Command(bin, "run", "--plugins", "", "--admin-addr", "127.0.0.1:0", "--rate", "20",
		"--partitions", "flow=8,budget=2,quota=2")
	cmd.Stdout, cmd.Stderr = w, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			logs, _ := os.ReadFile(stderr.Name())
			t.Fatalf("fabric run with its output closed at start-up: %v\nstderr:\n%s", err, logs)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("fabric run still running 60 s after its output closed")
	}
}
