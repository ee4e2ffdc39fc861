package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// soakSize is the soak's execution count per backend:
// FABRIC_SOAK_EXECUTIONS, else 10,000.
func soakSize(t *testing.T) int {
	if v := os.Getenv("FABRIC_SOAK_EXECUTIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FABRIC_SOAK_EXECUTIONS=%q: want a positive integer", v)
		}
		return n
	}
	return 10_000
}

// soakHost is one `fabric run` child process of the soak.
type soakHost struct {
	t    *testing.T
	bin  string
	args []string
	logs string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (h *soakHost) start() {
	h.t.Helper()
	f, err := os.OpenFile(h.logs, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(h.bin, h.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		h.t.Fatalf("start host: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	h.mu.Lock()
	h.cmd, h.done = cmd, done
	h.mu.Unlock()
}

// kill9 kills the host as a crash would and waits for it to be gone.
func (h *soakHost) kill9() {
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// exited reports whether the host's process ended (nobody killed it
// since it was started: it died on its own).
func (h *soakHost) exited() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// stop ends the host gracefully (SIGTERM), killing it after 30 s.
func (h *soakHost) stop() {
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		h.kill9()
	}
}

// Faults of one soak, on each backend. Each lands while work is in
// flight (soakRun.fault); the server restarts sit between the others.
const (
	soakHostKills     = 10
	soakWorkerCrashes = 10
)

// soakServerFault is one restart of the backend's server.
type soakServerFault struct {
	name    string
	restart func(context.Context) error
}

// soakTarget is what the soak needs of one backend: the SDK's provider,
// the `fabric run` flags that reach it and the plugins its hosts load,
// its three server restarts, the phase read and the final check.
type soakTarget struct {
	name     string
	provider backend.Provider
	hostArgs func(i int) []string
	plugins  []string
	restarts [3]soakServerFault
	// phases reads the lifecycle_phase of each of ids ("" when the
	// execution does not exist; a runnable one's eligibility after a
	// slash).
	phases func(ctx context.Context, ids []model.ExecutionID) ([]string, error)
	// check asserts every one of ids completed exactly once, that the
	// backend holds no other execution, and the audit clean.
	check func(t *testing.T, ctx context.Context, ids []model.ExecutionID)
	// describe logs up to 5 of ids not terminal, for a post-mortem.
	describe func(t *testing.T, ids []model.ExecutionID)
}

// TestSoakKill9 is the fault soak (issues 13 and 42), on Valkey and on
// Postgres alike: SDK workers run soakSize executions of every demo kind
// (plain, retried, delayed, suspended until signalled, diamond flows)
// while `fabric run` hosts are kill -9'd and restarted, workers crash
// (their leases left to expire and be reclaimed) and the server restarts
// three times (gracefully twice, and once by kill -9: Valkey with its
// append-only file on, Postgres recovering from its write-ahead log).
// Faults are driven by progress, not time: the work is submitted in
// waves, one per fault, and each fault lands once a quarter of what is
// in flight has ended, so every fault provably hits executions in flight
// (counted, printed and asserted > 0). Every execution must end
// completed exactly once (counted from the backend's own records), none
// lost, none stranded, and the audit (internal/audit) clean.
func TestSoakKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: builds the binary and runs for up to a few minutes per backend")
	}
	// make soak runs it (FABRIC_SOAK=1). Left out of make test until two
	// findings of its faults in flight are fixed: on Valkey a full make
	// test run ended 4 soak.delayed executions failed (0 completions), on
	// Postgres one left 5 executions active and leased for minutes.
	if os.Getenv("FABRIC_SOAK") != "1" {
		t.Skip("the fault soak runs under make soak (FABRIC_SOAK=1)")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Run("Valkey", func(t *testing.T) { t.Parallel(); runSoak(t, bin, valkeySoakTarget) })
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		runSoak(t, bin, postgresSoakTarget)
	})
}

// soakPlan is the order of the faults: host kills and worker crashes in
// turn, a server restart after every sixth.
func soakPlan() []string {
	var plan []string
	restarts := 0
	for i := 0; i < soakHostKills+soakWorkerCrashes; i++ {
		if i > 0 && i%6 == 0 && restarts < 3 {
			plan = append(plan, "server")
			restarts++
		}
		plan = append(plan, map[bool]string{true: "host", false: "worker"}[i%2 == 0])
	}
	for ; restarts < 3; restarts++ {
		plan = append(plan, "server")
	}
	return plan
}

// runSoak runs the soak on the backend target opens.
func runSoak(t *testing.T, bin string, open func(*testing.T, context.Context) *soakTarget) {
	n := soakSize(t)
	// Five minutes, and 100 ms per execution: a loaded machine is slow.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*100*time.Millisecond)
	defer cancel()
	tg := open(t, ctx)
	logDir, err := os.MkdirTemp("", "fabric-soak-logs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(logDir)
		}
	})
	plugins := t.TempDir()
	copyStock(t, plugins, tg.plugins...)
	hosts := make([]*soakHost, 2)
	for i := range hosts {
		hosts[i] = &soakHost{t: t, bin: bin, logs: filepath.Join(logDir, fmt.Sprintf("host%d.log", i)),
			args: append([]string{"run", "--demo=false", "--view", "off", "--admin-addr", "", "--plugins", plugins,
				"--log-level", "info"}, tg.hostArgs(i)...)}
		hosts[i].start()
		t.Cleanup(hosts[i].stop)
	}
	r := newSoakRun(t, ctx, tg, n, hosts, logDir)
	defer r.stopWorkers()
	r.run()
	for i, h := range hosts {
		if h.exited() {
			t.Errorf("host %d died on its own (log %s)", i, h.logs)
		}
	}
	// The check reads every execution: a context of its own, so a slow
	// run leaves it its time.
	cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer ccancel()
	tg.check(t, cctx, r.work.created())
}
