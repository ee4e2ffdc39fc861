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
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// failoverSize is the failover soak's execution count:
// FABRIC_FAILOVER_EXECUTIONS, else 2,000.
func failoverSize(t *testing.T) int {
	if v := os.Getenv("FABRIC_FAILOVER_EXECUTIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FABRIC_FAILOVER_EXECUTIONS=%q: want a positive integer", v)
		}
		return n
	}
	return 2_000
}

// TestFailoverSoak is issue 26's failover soak: a cluster of 3 primaries
// with one replica each, two `fabric run` hosts (the default plugin set)
// and SDK workers; a primary is killed (kill -9) while executions are
// being created and worked, its replica is promoted, and hosts, workers
// and the producer carry on through the moved slots. Every execution the
// producer was told exists must end completed, exactly once: one
// "released, completed" event in its lease history.
func TestFailoverSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("failover soak: builds the binary, runs a 6-node cluster")
	}
	t.Parallel()
	n := failoverSize(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	bin := filepath.Join(t.TempDir(), "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	plugins := t.TempDir()
	copyStock(t, plugins, host.DefaultPlugins...)

	cl := valkeytest.NewReplicatedCluster(t)
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: cl.URL(), Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vc.Close)
	lanes := []string{"fo-a", "fo-b", "fo-c", "fo-d"}
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: lanes, WaitpointHMACSecret: "00112233445566778899aabbccddeeff"}); err != nil {
		t.Fatal(err)
	}

	logDir, err := os.MkdirTemp("", "fabric-failover-logs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(logDir)
		}
	})
	var hosts []*soakHost
	for i := range 2 {
		h := &soakHost{t: t, bin: bin, logs: filepath.Join(logDir, fmt.Sprintf("host%d.log", i)),
			args: []string{"run", "--valkey-url", cl.URL(), "--demo=false", "--view", "off", "--admin-addr", "",
				"--plugins", plugins, "--log-level", "info", "--host-id", fmt.Sprintf("fo-host-%d", i), "--lease-ttl", "2s"}}
		h.start()
		t.Cleanup(h.stop)
		hosts = append(hosts, h)
	}

	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Creator: "failover", Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	handler := func(ctx context.Context, j *sdk.Job) error {
		runs.Add(1)
		if j.Kind == "fo.retry" && j.Attempt == 0 {
			return errors.New("first attempt fails on purpose")
		}
		return nil
	}
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	for i := range 4 {
		w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "fo", InstanceID: fmt.Sprintf("fo-%d-%d", i, rand.Int64()),
			Lanes: lanes, Concurrency: 8, LeaseTTL: 2 * time.Second, Logger: valkeytest.Logger()})
		if err != nil {
			t.Fatalf("connect worker: %v", err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(wctx, handler) }()
	}
	t.Cleanup(func() { stopWorkers(); wg.Wait() })

	// The producer: idempotency keys make a create retried after an error
	// of unknown outcome (the failover) return the first id.
	ids := make([]model.ExecutionID, 0, n)
	var idsMu sync.Mutex
	var created atomic.Int64
	var submit sync.WaitGroup
	var createRetries atomic.Int64
	for p := range 4 {
		submit.Add(1)
		go func() {
			defer submit.Done()
			for i := p; i < n; i += 4 {
				spec := sdk.ExecutionSpec{Lane: lanes[i%len(lanes)], Kind: "fo.plain", Payload: []byte(strconv.Itoa(i)),
					IdempotencyKey: "fo-" + strconv.Itoa(i)}
				if i%10 == 0 {
					spec.Kind = "fo.retry"
					spec.Policy = &sdk.Policy{MaxRetries: 2, Backoff: sdk.ExponentialBackoff(100*time.Millisecond, time.Second, 2)}
				}
				var id model.ExecutionID
				var err error
				for try := 0; try < 400; try++ {
					if id, err = client.CreateExecution(ctx, spec); err == nil || ctx.Err() != nil {
						break
					}
					createRetries.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
				idsMu.Lock()
				ids = append(ids, id)
				idsMu.Unlock()
				created.Add(1)
				// A steady stream, so the kill lands mid-run.
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}

	terminal := func() (int, error) {
		idsMu.Lock()
		cur := append([]model.ExecutionID(nil), ids...)
		idsMu.Unlock()
		return countTerminal(ctx, vc, cur)
	}

	// Kill a primary once a third of the executions exist.
	start := time.Now()
	for created.Load() < int64(n/3) {
		select {
		case <-ctx.Done():
			t.Fatalf("only %d of %d created before the kill", created.Load(), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
	roles, _ := cl.Roles(ctx)
	victim := -1
	for i, r := range roles {
		if r == "master" {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatalf("no primary among %v", roles)
	}
	killedAt := time.Now()
	doneAtKill, _ := terminal()
	t.Logf("%s: kill -9 primary %s (%d created, %d terminal)", killedAt.Sub(start).Round(time.Millisecond),
		cl.Nodes[victim].TCPAddr(), created.Load(), doneAtKill)
	cl.Nodes[victim].Kill()
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	if err := cl.WaitPrimaries(fctx, valkeytest.ClusterPrimaries); err != nil {
		fcancel()
		t.Fatalf("failover: %v", err)
	}
	fcancel()
	t.Logf("failover: a replica took over after %s", time.Since(killedAt).Round(time.Millisecond))

	for {
		submit.Wait()
		done, err := terminal()
		if err == nil && done == n {
			break
		}
		select {
		case <-ctx.Done():
			describeUnfinished(t, vc, ids, 5)
			t.Fatalf("%d of %d executions terminal after %s (last read error %v); hosts' logs in %s",
				done, n, time.Since(start).Round(time.Second), err, logDir)
		case <-time.After(500 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)

	t.Logf("failover soak: %d executions in %s through a primary kill -9; %d handler runs, %d create retries",
		n, elapsed.Round(time.Millisecond), runs.Load(), createRetries.Load())
	if doneAtKill >= n {
		t.Errorf("the kill came after the run (%d of %d terminal)", doneAtKill, n)
	}
	for i, h := range hosts {
		select {
		case <-h.done:
			t.Errorf("host %d exited during the failover; log in %s", i, h.logs)
		default:
		}
	}
	checkCompletedOnce(t, ctx, vc, ids, n)
}
