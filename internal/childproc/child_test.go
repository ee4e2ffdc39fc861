//go:build !windows && !js && !wasip1 && !plan9

package childproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/internal/testbackend"
)

// TestChildWaitReady: a child that exits before it is ready is
// ErrExited; one never ready is ErrNotReady and killed; one ready is nil.
func TestChildWaitReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	notYet := func() error { return errors.New("not yet") }

	var exits Child
	if err := exits.Start(exec.Command("sh", "-c", "exit 3")); err != nil {
		t.Fatal(err)
	}
	if err := exits.WaitReady(ctx, notYet, 5*time.Millisecond, time.Minute); !errors.Is(err, ErrExited) {
		t.Fatalf("exiting child: %v, want ErrExited", err)
	}

	var slow Child
	if err := slow.Start(exec.Command("sleep", "60")); err != nil {
		t.Fatal(err)
	}
	pid := slow.PID()
	if err := slow.WaitReady(ctx, notYet, 5*time.Millisecond, 100*time.Millisecond); !errors.Is(err, ErrNotReady) {
		t.Fatalf("never ready: %v, want ErrNotReady", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("child %d not killed after ErrNotReady (kill 0: %v)", pid, err)
	}

	var ready Child
	if err := ready.Start(exec.Command("sleep", "60")); err != nil {
		t.Fatal(err)
	}
	defer ready.Kill()
	if err := ready.WaitReady(ctx, func() error { return nil }, time.Millisecond, time.Second); err != nil {
		t.Fatalf("ready child: %v", err)
	}
}

// TestChildStopTakesItsGroup: Stop signals the child, and what it forked
// (a server's own children) goes with it; a second Stop does nothing.
func TestChildStopTakesItsGroup(t *testing.T) {
	t.Parallel()
	var c Child
	// The shell ignores SIGTERM (once its trap is set), so Stop may have
	// to kill it after the grace; its background sleep is in its group.
	if err := c.Start(exec.Command("sh", "-c", "trap '' TERM; sleep 60 & wait")); err != nil {
		t.Fatal(err)
	}
	pgid := c.PID()
	if !c.Stop(syscall.SIGTERM, 200*time.Millisecond) {
		t.Fatal("first Stop reported already stopped")
	}
	// The background sleep, killed with the group, is reaped by init: a
	// moment later the group is empty.
	testbackend.Eventually(t, "childproc", 10*time.Second, fmt.Sprintf("process group %d empty after Stop", pgid), func() bool {
		return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	})
	if c.Stop(syscall.SIGTERM, time.Second) {
		t.Fatal("second Stop reported stopping again")
	}
}
