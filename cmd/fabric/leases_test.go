package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

// fabricProc is one `fabric run` process of a test.
type fabricProc struct {
	id     string
	cmd    *exec.Cmd
	stderr string
	exited chan struct{}
	err    error
}

func (p *fabricProc) logs() string {
	b, _ := os.ReadFile(p.stderr)
	return string(b)
}

// startFabric runs `fabric run` as host id on url, without the demo
// workload, with the plugins of dir and a lease TTL of ttl.
func startFabric(t *testing.T, bin, url, dir, id string, ttl time.Duration) *fabricProc {
	t.Helper()
	p := &fabricProc{id: id, exited: make(chan struct{}), stderr: filepath.Join(t.TempDir(), id+".stderr")}
	errf, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	p.cmd = exec.Command(bin, "run", "--valkey-url", url, "--demo=false", "--view", "off", "--admin-addr", "",
		"--plugins", dir, "--host-id", id, "--lease-ttl", ttl.String(), "--log-level", "info")
	p.cmd.Stdout, p.cmd.Stderr = errf, errf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// ownership reads who holds which partition lease.
func ownership(t *testing.T, c *valkey.Client) partlease.Ownership {
	t.Helper()
	tbl, err := c.ReadPartitionLeases(valkeytest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return partlease.Summarize(tbl)
}

// holds reports whether o is exactly these hosts with these flow ranges,
// every one live, nothing unowned.
func holds(o partlease.Ownership, flow map[string]string) bool {
	if len(o.Hosts) != len(flow) || o.Free != 0 {
		return false
	}
	for _, h := range o.Hosts {
		if !h.Live || flow[h.Host] != h.Ranges["flow"] {
			return false
		}
	}
	return true
}

// TestRunKill9PartitionTakeover runs two `fabric run` processes on one
// server: they split the partitions; one is killed with SIGKILL and the
// survivor owns every partition within about one lease TTL (measured);
// `fabric status` shows the ownership; a SIGTERM then releases the
// survivor's leases on its way out instead of letting them expire.
func TestRunKill9PartitionTakeover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	copyStock(t, dir, "lease_expiry")
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	const ttl = 2 * time.Second

	a := startFabric(t, bin, srv.URL(), dir, "proc-a", ttl)
	b := startFabric(t, bin, srv.URL(), dir, "proc-b", ttl)
	valkeytest.Eventually(t, 90*time.Second, "the two processes split the partitions", func() bool {
		return holds(ownership(t, c), map[string]string{"proc-a": "0-127", "proc-b": "128-255"})
	})
	// Both hosts finished starting (a signal before that aborts the run).
	valkeytest.Eventually(t, 90*time.Second, "both processes report their host id", func() bool {
		return strings.Contains(a.logs(), "host id proc-a: partition leases (TTL 2s)") &&
			strings.Contains(b.logs(), "host id proc-b: partition leases (TTL 2s)")
	})

	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL: nothing is released
		t.Fatal(err)
	}
	killed := time.Now()
	<-a.exited
	valkeytest.Eventually(t, 60*time.Second, "proc-b owns every partition after proc-a's kill -9", func() bool {
		return holds(ownership(t, c), map[string]string{"proc-b": "0-255"})
	})
	t.Logf("takeover after kill -9: proc-b owns all partitions %s after SIGKILL (lease TTL %s)", time.Since(killed).Round(time.Millisecond), ttl)

	code, out, errOut := runCmd(t, "status", "--valkey-url", srv.URL(), "--sample", "0", "--admin", "http://127.0.0.1:1")
	if want := "partitions  proc-b (live, 320)  flow 0-255 · budget 0-31 · quota 0-31"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("fabric status: code %d, want a line %q:\n%s\n%s", code, want, out, errOut)
	}

	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("proc-b still running 60s after SIGTERM\n%s", b.logs())
	}
	if b.err != nil {
		var ee *exec.ExitError
		if !errors.As(b.err, &ee) || ee.ExitCode() != 0 {
			t.Fatalf("proc-b exited with %v\n%s", b.err, b.logs())
		}
	}
	// Released, not expired: a released lease has expires_at 0 and the
	// member is gone at once.
	raw := c.Raw()
	ctx := valkeytest.Context(t, 10*time.Second)
	exp, err := raw.Do(ctx, raw.B().Hget().Key(valkey.PartitionLeaseKey(model.Partition{Family: model.FamilyFlow, Index: 0})).Field("expires_at").Build()).ToString()
	if err != nil || exp != "0" {
		t.Fatalf("lease of partition 0 after SIGTERM: expires_at %q (%v), want 0 (released)\n%s", exp, err, b.logs())
	}
	if n, err := raw.Do(ctx, raw.B().Zcard().Key(valkey.HostsKey).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("%d members left after SIGTERM (%v)", n, err)
	}
	if !strings.Contains(b.logs(), "partition leases released") {
		t.Fatalf("proc-b did not log its release:\n%s", b.logs())
	}
}
