package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// TestMakeRunCtrlCExitsZero runs `fabric run` under make on a terminal,
// as `make run` does, and presses Ctrl-C once the live view is up: fabric
// drains and exits 0, and make exits 0 with it instead of reporting an
// interrupt (exit 130) — the README's promise.
func TestMakeRunCtrlCExitsZero(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mk := "run:\n\t" + bin + " run --plugins '' --admin-addr 127.0.0.1:0 --rate 20 --refresh 200ms" +
		" --census-interval 200ms --partitions flow=8,budget=2,quota=2\n"
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(mk), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-C", dir, "--no-print-directory", "run")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var mu sync.Mutex
	var screen bytes.Buffer
	grew := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			select {
			case grew <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	seen := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(screen.String(), s)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(90 * time.Second)
	for !seen("completed") {
		select {
		case err := <-exited:
			t.Fatalf("make run ended before the view was up: %v\n%s", err, screen.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("the live view never showed the workload:\n%s", screen.String())
		case <-grew:
		}
	}
	if _, err := tty.Write([]byte{keyInterrupt}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("make run after Ctrl-C: %v\n%s", err, screen.String())
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("make run still running 90 s after Ctrl-C:\n%s", screen.String())
	}
	if seen("Interrupt") {
		t.Fatalf("make reported an interrupt:\n%s", screen.String())
	}
}
