package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestNothingLeftBehind runs `fabric run` with every demo kind the way a
// user runs it — on its private server, on an existing server given no
// waitpoint secret, on one given a secret, with a worker crashing
// mid-lease, across a server restart, and on Postgres — and after the
// drain checks the invariant of internal/audit: every execution ended or
// states why it waits, with zero violations. The private-server and
// Postgres runs audit themselves (their data dies with them); the test
// audits the existing servers.
func TestNothingLeftBehind(t *testing.T) {
	dir := t.TempDir()
	copyStock(t, dir, "lease_expiry", "delayed_promoter", "pg_lease_expiry", "pg_delayed_promoter", "pg_dependency_reconciler")
	const mix = "immediate=2,delayed=1,retry=1,suspend=1,dag=1"
	base := []string{"run", "--plugins", dir, "--duration", "3s", "--rate", "30", "--mix", mix,
		"--admin-addr", "127.0.0.1:0", "--partitions", "flow=16,budget=4,quota=4"}
	// Every suspended item resumed; so did every delayed item its handler
	// parked (sdk.DelayFor), each counted "resumed" too — unless a worker
	// crashing mid-lease took it back first ("reclaim").
	suspended := regexp.MustCompile(`(\d+) suspended, (\d+) resumed, (\d+) delayed`)
	resumedAll := func(m []string) bool {
		s, _ := strconv.Atoi(m[1])
		r, _ := strconv.Atoi(m[2])
		d, _ := strconv.Atoi(m[3])
		return s > 0 && r >= s && r <= s+d
	}

	type row struct {
		name             string
		external, secret bool
		crash, restart   bool
		postgres         bool
		want, notWant    string
	}
	rows := []row{
		{name: "Embedded", want: "violations: 0"},
		{name: "ExistingServerNoSecret", external: true, want: "installing a random one"},
		{name: "ExistingServerWithSecret", external: true, secret: true, notWant: "installing a random one"},
		{name: "WorkerCrashMidLease", external: true, secret: true, crash: true},
		{name: "ServerRestart", external: true, secret: true, restart: true},
		{name: "Postgres", postgres: true, want: "violations: 0"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			args := append([]string(nil), base...)
			var srv *valkey.Server
			var url string
			if r.external {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				s, err := valkey.StartServer(ctx, valkey.ServerConfig{Persist: r.restart, Logger: valkeytest.Logger()})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Stop() })
				srv, url = s, s.URL()
				args = append(args, "--valkey-url", url)
			}
			if r.secret {
				args = append(args, "--waitpoint-hmac-secret", "00112233445566778899aabbccddeeff")
			}
			if r.postgres {
				args = append(args, "--backend", "postgres")
			}
			var faults sync.WaitGroup
			var crashed []model.ExecutionID
			if r.crash || r.restart {
				faults.Add(1)
				go func() {
					defer faults.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					vc := waitForBootstrap(t, ctx, url)
					if vc == nil {
						return
					}
					if r.crash {
						crashed = crashWorkerMidLease(t, ctx, vc, 3)
					}
					if r.restart {
						if err := srv.RestartGracefully(ctx); err != nil {
							t.Errorf("restart server: %v", err)
						}
					}
				}()
			}
			code, out, errOut := runCmd(t, args...)
			faults.Wait()
			if code != 0 {
				t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if r.want != "" && !strings.Contains(out, r.want) {
				t.Errorf("output lacks %q:\n%s", r.want, out)
			}
			if r.notWant != "" && strings.Contains(out, r.notWant) {
				t.Errorf("output has %q:\n%s", r.notWant, out)
			}
			if r.postgres {
				// Every execution the database holds was counted as
				// created, and the one demo workload suspended and
				// resumed there too.
				audited := regexp.MustCompile(`demo: audit: (\d+) executions`).FindStringSubmatch(out)
				counted := regexp.MustCompile(`demo: (\d+) executions \(`).FindStringSubmatch(out)
				if audited == nil || counted == nil || audited[1] != counted[1] {
					t.Errorf("audit %v, summary %v: every execution in the database must be counted as submitted:\n%s", audited, counted, out)
				}
				if m := suspended.FindStringSubmatch(out); m == nil || !resumedAll(m) {
					t.Errorf("suspend work did not suspend and resume on Postgres (%v):\n%s", m, out)
				}
				return
			}
			// Start-up says what it changed on the server.
			if !strings.Contains(out, "flowfabric library 34 loaded (installed on the server now)") {
				t.Errorf("start-up does not say it installed the library on a fresh server:\n%s", out)
			}
			if m := suspended.FindStringSubmatch(out); m == nil || !resumedAll(m) {
				t.Errorf("suspend work did not suspend and resume (%v):\n%s", m, out)
			}
			if !r.external {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, Partitions: testParts, Logger: valkeytest.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			defer vc.Close()
			rep, err := audit.Valkey(ctx, vc, audit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || rep.Checked == 0 || rep.Terminal != rep.Checked {
				t.Fatalf("audit: %s\n%v", rep.Summary(), rep.Violations)
			}
			// The operator's view of the same check.
			stuck := []string{"executions", "stuck", "--valkey-url", url, "--partitions", "flow=16,budget=4,quota=4"}
			if code, out, errOut := runCmd(t, stuck...); code != 0 || !strings.Contains(out, "violations: 0") {
				t.Fatalf("executions stuck: code %d\n%s%s", code, out, errOut)
			}
			if r.name == "ExistingServerWithSecret" {
				// One execution in a state nothing acts on: named, exit 1.
				var victim string
				for p := range testParts.Flow {
					m, err := vc.Raw().Do(ctx, vc.Raw().B().Srandmember().Key(model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: p}).AllExecutions()).Build()).ToString()
					if err == nil && m != "" {
						victim = m
						break
					}
				}
				if err := vc.Raw().Do(ctx, vc.Raw().B().Hset().Key(model.KeysFor(model.ExecutionID(victim)).Core()).FieldValue().
					FieldValue("lifecycle_phase", "limbo").Build()).Error(); err != nil {
					t.Fatal(err)
				}
				code, out, _ := runCmd(t, stuck...)
				if code != 1 || !strings.Contains(out, victim) || !strings.Contains(out, "unknown lifecycle phase") {
					t.Fatalf("executions stuck with %s in limbo: code %d\n%s", victim, code, out)
				}
			}
			for _, id := range crashed {
				st, err := vc.Raw().Do(ctx, vc.Raw().B().Hmget().Key(model.KeysFor(id).Core()).
					Field("lifecycle_phase", "lease_reclaim_count").Build()).AsStrSlice()
				if err != nil || st[0] != model.PhaseTerminal || st[1] == "" || st[1] == "0" {
					t.Errorf("crashed lease of %s: phase/reclaims %v (%v), want terminal after a reclaim", id, st, err)
				}
			}
		})
	}
}

// testParts are the partition counts the table's runs use.
var testParts = model.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// waitForBootstrap connects to url once `fabric run` has written the
// deployment's partition config (a worker that connects before would
// route with the defaults).
func waitForBootstrap(t *testing.T, ctx context.Context, url string) *valkey.Client {
	t.Helper()
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, Partitions: testParts, Logger: valkeytest.Logger()})
	if err != nil {
		t.Errorf("dial: %v", err)
		return nil
	}
	t.Cleanup(vc.Close)
	for ctx.Err() == nil {
		if n, err := vc.Raw().Do(ctx, vc.Raw().B().Hlen().Key(model.KeyConfigPartitions).Build()).AsInt64(); err == nil && n > 0 {
			if _, err := vc.Raw().Do(ctx, vc.Raw().B().Scard().Key(model.KeyLanesIndex).Build()).AsInt64(); err == nil {
				return vc
			}
		}
		tm := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-tm.C:
		}
	}
	t.Errorf("fabric run never wrote %s", model.KeyConfigPartitions)
	return nil
}

// crashWorkerMidLease connects a worker to the demo's lanes, claims up to
// n executions and dies without releasing them (its context ends: no
// renewals, no hand-back), as a crashed process would. It enqueues what it
// claims ("immediate" work on a demo lane, which the demo's workers finish
// once it is reclaimed) and claims each by id at once: racing the demo's
// workers for the demo's own work, they claim almost everything first.
func crashWorkerMidLease(t *testing.T, ctx context.Context, vc *valkey.Client, n int) []model.ExecutionID {
	t.Helper()
	wctx, kill := context.WithCancel(ctx)
	defer kill()
	w, err := sdk.Connect(wctx, vc, sdk.WorkerConfig{WorkerID: "doomed", Lanes: []string{"demo-a", "demo-b", "demo-c"},
		LeaseTTL: time.Second, Logger: valkeytest.Logger()})
	if err != nil {
		t.Errorf("connect: %v", err)
		return nil
	}
	c, err := sdk.NewClient(wctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Errorf("client: %v", err)
		return nil
	}
	var ids []model.ExecutionID
	deadline := time.Now().Add(10 * time.Second)
	for len(ids) < n && time.Now().Before(deadline) {
		id, err := c.Enqueue(wctx, "immediate", []byte(`{"n":0}`), sdk.WithLane("demo-a"))
		if err != nil {
			t.Errorf("enqueue: %v", err)
			break
		}
		l, err := w.ClaimExecution(wctx, id)
		if err != nil {
			continue // a demo worker was first; it runs this one
		}
		if l != nil {
			ids = append(ids, l.ID)
		}
	}
	kill()
	_ = w.Close(context.Background())
	if len(ids) == 0 {
		t.Error("the doomed worker claimed nothing")
	}
	t.Logf("worker crashed holding %d leases: %s", len(ids), strconv.Quote(strings.Join(func() []string {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = string(id)
		}
		return s
	}(), " ")))
	return ids
}
