//go:build !windows && !js && !wasip1 && !plan9

package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ErrExited is WaitReady's error when the child exited before it was
// ready; the launcher adds what its log says.
var ErrExited = errors.New("exited during start")

// ErrNotReady is WaitReady's error when the child did not become ready
// within the timeout (it is killed).
var ErrNotReady = errors.New("not ready in time")

// Child is a server process a launcher (valkey.Server, postgres.Server)
// runs: started in its own process group and killed with the parent
// (Attr), reaped as soon as it exits, and stopped by signal then SIGKILL
// to its whole group. The zero value holds no process; Start may run it
// again after it exited (a restart).
type Child struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
}

// Start starts cmd as the child's process, with Attr unless
// cmd.SysProcAttr is set already, and reaps it when it exits.
func (c *Child) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = Attr()
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	c.mu.Lock()
	c.cmd, c.exited, c.stopped = cmd, exited, false
	c.mu.Unlock()
	return nil
}

// WaitReady calls ready every interval until it returns nil. It fails
// with ErrExited when the process exits first, with ErrNotReady after
// timeout and with ctx's error when ctx ends; the last two kill the
// process.
func (c *Child) WaitReady(ctx context.Context, ready func() error, interval, timeout time.Duration) error {
	c.mu.Lock()
	exited := c.exited
	c.mu.Unlock()
	deadline := time.Now().Add(timeout)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if err := ready(); err == nil {
			return nil
		}
		t.Reset(interval)
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			c.Kill()
			return ctx.Err()
		case <-t.C:
		}
		if time.Now().After(deadline) {
			c.Kill()
			return ErrNotReady
		}
	}
}

// PID is the process's id (0 when none was started).
func (c *Child) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Kill sends SIGKILL to the process's whole group, as a crash would, and
// waits for the process to be reaped.
func (c *Child) Kill() {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	waitGroupGone(cmd.Process.Pid)
}

// groupGoneWait bounds waitGroupGone.
const groupGoneWait = 5 * time.Second

// waitGroupGone waits, up to groupGoneWait, until no process of group
// pgid is alive: the leader is reaped at once, but its own children (a
// Postgres cluster's backends) die on their own time, holding what the
// next start needs (a backend still attached to the shared memory block
// makes a new postmaster refuse to start).
func waitGroupGone(pgid int) {
	deadline := time.Now().Add(groupGoneWait)
	for groupAlive(pgid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// Terminate sends sig to a running process, waits up to grace for it to
// exit (then kills it), and kills what is left of its group (a server's
// own children outliving it would keep its files open).
func (c *Child) Terminate(sig os.Signal, grace time.Duration) {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-exited:
	default:
		cmd.Process.Signal(sig)
		t := time.NewTimer(grace)
		select {
		case <-exited:
		case <-t.C:
			c.Kill()
		}
		t.Stop()
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	waitGroupGone(cmd.Process.Pid)
}

// Stop is Terminate once: it reports false, doing nothing, when the child
// was stopped already (until the next Start).
func (c *Child) Stop(sig os.Signal, grace time.Duration) bool {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return false
	}
	c.stopped = true
	c.mu.Unlock()
	c.Terminate(sig, grace)
	return true
}

// LogTail is the last n lines of a child's log b, joined by " | ", for
// an error saying why it did not start.
func LogTail(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

// Dir is a server child's working directory: the one its config names,
// or a fresh temporary one the launcher owns and removes.
type Dir struct {
	// Path is the directory.
	Path  string
	owned bool
}

// MakeDir returns dir, or when dir is "" a fresh temporary directory
// named after pattern (os.MkdirTemp's).
func MakeDir(dir, pattern string) (Dir, error) {
	if dir != "" {
		return Dir{Path: dir}, nil
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		return Dir{}, fmt.Errorf("server temp dir: %w", err)
	}
	return Dir{Path: d, owned: true}, nil
}

// Remove deletes the directory and all in it when MakeDir created it;
// a directory the config named is left alone.
func (d Dir) Remove() error {
	if !d.owned {
		return nil
	}
	if err := os.RemoveAll(d.Path); err != nil {
		return fmt.Errorf("remove server dir: %w", err)
	}
	return nil
}
