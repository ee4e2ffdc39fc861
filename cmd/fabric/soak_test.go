package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// soakSize is the soak's execution count: FABRIC_SOAK_EXECUTIONS, else
// 10,000.
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

// soakChaos is how long the soak injects faults; after it, the system
// must converge on its own.
const soakChaos = 45 * time.Second

// TestSoakKill9 is the bounded soak of issue 13: SDK workers complete
// soakSize executions while `fabric run` hosts (the default and flow
// engine plugin sets) are kill -9'd and restarted, workers crash (their
// leases left to expire and be reclaimed), and the server itself is
// restarted once (SIGTERM: it flushes its append-only file, so no
// acknowledged write is lost). Every execution must end completed, and
// exactly once: one "released, completed" event in its lease history,
// counted from the keyspace.
func TestSoakKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: builds the binary and runs for up to a few minutes")
	}
	t.Parallel()
	n := soakSize(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	bin := filepath.Join(t.TempDir(), "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	plugins := t.TempDir()
	copyStock(t, plugins, append(append([]string{}, host.DefaultPlugins...), host.FlowEnginePlugins...)...)

	srv, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: valkeytest.Logger(),
		ExtraArgs: []string{"--appendonly", "yes", "--appendfsync", "everysec"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: srv.URL(), Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vc.Close() })
	lanes := []string{"soak-a", "soak-b", "soak-c", "soak-d", "soak-e", "soak-f", "soak-g", "soak-h"}
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: lanes}); err != nil {
		t.Fatal(err)
	}

	// The hosts' logs outlive a failed run, for the post-mortem.
	logDir, err := os.MkdirTemp("", "fabric-soak-logs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(logDir)
		}
	})
	hosts := make([]*soakHost, 2)
	for i := range hosts {
		hosts[i] = &soakHost{t: t, bin: bin, logs: filepath.Join(logDir, fmt.Sprintf("host%d.log", i)),
			args: []string{"run", "--valkey-url", srv.URL(), "--demo=false", "--view", "off", "--admin-addr", "",
				"--plugins", plugins, "--log-level", "info",
				// A restarted host keeps its id, so it takes its own leases back
				// at once; a short TTL bounds a dead host's gap.
				"--host-id", fmt.Sprintf("soak-host-%d", i), "--lease-ttl", "2s"}}
		hosts[i].start()
		t.Cleanup(hosts[i].stop)
	}

	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Creator: "soak", Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}

	// Handlers count their runs (at least once per execution; more when a
	// crashed worker's lease was reclaimed mid-run).
	var runs atomic.Int64
	handler := func(ctx context.Context, j *sdk.Job) error {
		runs.Add(1)
		if j.Kind == "soak.retry" && j.Attempt == 0 {
			return errors.New("first attempt fails on purpose")
		}
		return nil
	}
	type soakWorker struct {
		crash context.CancelFunc
		done  chan struct{}
	}
	var wmu sync.Mutex
	var workers []*soakWorker
	startWorker := func(i int) {
		life, crash := context.WithCancel(ctx)
		w, err := sdk.Connect(life, vc, sdk.WorkerConfig{WorkerID: "soak", InstanceID: fmt.Sprintf("soak-%d-%d", i, rand.Int64()),
			Lanes: lanes, Concurrency: 8, LeaseTTL: 2 * time.Second, Logger: valkeytest.Logger()})
		if err != nil {
			crash()
			t.Errorf("connect worker: %v", err)
			return
		}
		sw := &soakWorker{crash: crash, done: make(chan struct{})}
		go func() { defer close(sw.done); _ = w.Run(life, handler) }()
		wmu.Lock()
		workers = append(workers, sw)
		wmu.Unlock()
	}
	for i := 0; i < 4; i++ {
		startWorker(i)
	}
	t.Cleanup(func() {
		wmu.Lock()
		defer wmu.Unlock()
		for _, w := range workers {
			w.crash()
			<-w.done
		}
	})

	// Submit: a tenth fail their first attempt and retry after 100 ms,
	// so the hosts' delayed promoter is part of the run.
	ids := make([]model.ExecutionID, 0, n)
	var idsMu sync.Mutex
	var submit sync.WaitGroup
	for p := range 4 {
		submit.Add(1)
		go func() {
			defer submit.Done()
			for i := p; i < n; i += 4 {
				spec := sdk.ExecutionSpec{Lane: lanes[i%len(lanes)], Kind: "soak.plain", Payload: []byte(strconv.Itoa(i))}
				if i%10 == 0 {
					spec.Kind = "soak.retry"
					spec.Policy = &sdk.Policy{MaxRetries: 2, Backoff: sdk.ExponentialBackoff(100*time.Millisecond, time.Second, 2)}
				}
				var id model.ExecutionID
				var err error
				// A create refused while the server restarts is retried:
				// the test's producer is a client like any other.
				for try := 0; try < 100; try++ {
					if id, err = client.CreateExecution(ctx, spec); err == nil || ctx.Err() != nil {
						break
					}
					time.Sleep(50 * time.Millisecond) // back off while the server restarts
				}
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
				idsMu.Lock()
				ids = append(ids, id)
				idsMu.Unlock()
			}
		}()
	}

	// Chaos until every execution is terminal: every 3 s one fault in
	// turn — kill -9 a host and start it again, crash a worker and start
	// a replacement — and the server killed and restarted once.
	terminal := func() (int, error) {
		idsMu.Lock()
		cur := append([]model.ExecutionID(nil), ids...)
		idsMu.Unlock()
		return countTerminal(ctx, vc, cur)
	}
	start := time.Now()
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	faults, serverRestarted := 0, false
	var hostKills, workerCrashes int
	for {
		submit.Wait()
		done, err := terminal()
		if err == nil && done == n {
			break
		}
		if testing.Verbose() {
			t.Logf("%s: %d/%d terminal (read error %v), %d handler runs", time.Since(start).Round(time.Millisecond), done, n, err, runs.Load())
		}
		if time.Since(start) > soakChaos {
			// Quiet: the survivors converge.
			select {
			case <-ctx.Done():
				describeUnfinished(t, vc, ids, 5)
				t.Fatalf("soak: %d of %d executions terminal after %s (last read error %v); hosts' logs in %s",
					done, n, time.Since(start).Round(time.Second), err, logDir)
			case <-tick.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			describeUnfinished(t, vc, ids, 5)
			t.Fatalf("soak: %d of %d executions terminal after %s (last read error %v); hosts' logs in %s",
				done, n, time.Since(start).Round(time.Second), err, logDir)
		case <-tick.C:
		}
		switch faults++; {
		case faults == 4 && !serverRestarted:
			t.Logf("%s: server restart", time.Since(start).Round(time.Millisecond))
			if err := srv.RestartGracefully(ctx); err != nil {
				t.Fatalf("restart server: %v", err)
			}
			serverRestarted = true
		case faults%2 == 0:
			h := hosts[faults/2%len(hosts)]
			h.kill9()
			h.start()
			hostKills++
		default:
			wmu.Lock()
			victim := workers[0]
			workers = workers[1:]
			wmu.Unlock()
			victim.crash()
			<-victim.done
			startWorker(100 + faults)
			workerCrashes++
		}
	}
	elapsed := time.Since(start)
	if !serverRestarted {
		// The run was quicker than the fourth fault: restart now and check
		// that nothing was lost across it.
		if err := srv.RestartGracefully(ctx); err != nil {
			t.Fatalf("restart server: %v", err)
		}
	}

	t.Logf("soak: %d executions in %s (%.0f/s) through %d host kill -9s, %d worker crashes, 1 server restart; %d handler runs",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), hostKills, workerCrashes, runs.Load())
	checkCompletedOnce(t, ctx, vc, ids, n)
}

// describeUnfinished logs the state of up to max executions that are not
// terminal.
func describeUnfinished(t *testing.T, vc *valkey.Client, ids []model.ExecutionID, max int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw := vc.Raw()
	shown := 0
	for _, id := range ids {
		core, err := raw.Do(ctx, raw.B().Hgetall().Key(model.KeysFor(id).Core()).Build()).AsStrMap()
		if err != nil || core["lifecycle_phase"] == model.PhaseTerminal {
			continue
		}
		t.Logf("unfinished %s: phase=%s ownership=%s eligibility=%s blocking=%s attempt_state=%s attempts=%s lane=%s kind=%s delay_until=%s",
			id, core["lifecycle_phase"], core["ownership_state"], core["eligibility_state"], core["blocking_reason"],
			core["attempt_state"], core["attempt_count"], core["lane_id"], core["execution_kind"], core["delay_until"])
		if shown++; shown == max {
			return
		}
	}
}
