package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/admin/consoletest"
)

// consoleHost serves a seeded deployment's admin API with token, as
// `fabric run --admin-token-file` does.
func consoleHost(t *testing.T, token string) (string, *consoletest.Seeded) {
	t.Helper()
	vc := valkeytest.Client(t)
	s := consoletest.Seed(t, vc)
	srv := admin.NewServer(admin.ServerConfig{Addr: "127.0.0.1:0", Backend: vc, AdminToken: token, Logger: valkeytest.Logger()})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return "http://" + srv.Addr().String(), s
}

func TestConsoleCLI(t *testing.T) {
	const token = "cli-token-42"
	addr, s := consoleHost(t, token)
	tokFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := runCmd(t, append(args, "--admin", addr)...)
		if code != want {
			t.Fatalf("fabric %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out, errOut
	}

	t.Run("executions list", func(t *testing.T) {
		out, _ := run(0, "executions", "list", "--lane", consoletest.LaneA, "--state", "failed")
		if !strings.Contains(out, string(s.Failed)) || strings.Contains(out, string(s.Completed)) || !strings.Contains(out, "failed") {
			t.Fatalf("list:\n%s", out)
		}
		out, _ = run(0, "executions", "list", "--limit", "3", "--json")
		var p admin.ExecutionPage
		if err := json.Unmarshal([]byte(out), &p); err != nil || len(p.Executions) != 3 || p.NextCursor == "" {
			t.Fatalf("list --json: %v %+v", err, p)
		}
		out, _ = run(0, "executions", "list", "--limit", "3", "--cursor", p.NextCursor)
		if strings.Contains(out, p.Executions[0].ID) || !strings.Contains(out, "more: --cursor") {
			t.Fatalf("second page repeats the first or has no cursor:\n%s", out)
		}
		_, errOut := run(1, "executions", "list", "--lane", "nope")
		if !strings.Contains(errOut, `unknown lane "nope"`) || !strings.Contains(errOut, "404") {
			t.Fatalf("unknown lane: %s", errOut)
		}
		run(1, "executions", "list", "--state", "sleepy")
		var asc, desc admin.ExecutionPage
		out, _ = run(0, "executions", "list", "--lane", consoletest.LaneA, "--json")
		_ = json.Unmarshal([]byte(out), &asc)
		out, _ = run(0, "executions", "list", "--lane", consoletest.LaneA, "--desc", "--json")
		_ = json.Unmarshal([]byte(out), &desc)
		if len(asc.Executions) != 6 || len(desc.Executions) != 6 || asc.Executions[0].ID != desc.Executions[5].ID {
			t.Fatalf("--desc: asc %+v desc %+v", asc.Executions, desc.Executions)
		}
	})

	t.Run("executions show", func(t *testing.T) {
		out, _ := run(0, "executions", "show", string(s.Failed))
		for _, want := range []string{"public_state: failed", "decoder exploded", "lease history: 2 events", "acquired", `payload (22 bytes): {"image":"broken.png"}`} {
			if !strings.Contains(out, want) {
				t.Fatalf("show lacks %q:\n%s", want, out)
			}
		}
		out, _ = run(0, "executions", "show", "--json", string(s.Left))
		var d admin.ExecutionDetail
		if err := json.Unmarshal([]byte(out), &d); err != nil || d.Flow == nil || d.Flow.FlowID != s.Flow.String() {
			t.Fatalf("show --json: %v %+v", err, d.Flow)
		}
		_, errOut := run(1, "executions", "show", "bad-id")
		if !strings.Contains(errOut, "400") {
			t.Fatalf("bad id: %s", errOut)
		}
		run(2, "executions", "show")
	})

	t.Run("flows show", func(t *testing.T) {
		out, _ := run(0, "flows", "show", s.Flow.String())
		for _, want := range []string{"members=3 edges=2", "completed", "active", "waiting", "n1 -> ", "success_only, satisfied"} {
			if !strings.Contains(out, want) {
				t.Fatalf("flows show lacks %q:\n%s", want, out)
			}
		}
		run(1, "flows", "show", "00000000-0000-4000-8000-000000000001")
	})

	t.Run("lanes and workers", func(t *testing.T) {
		out, _ := run(0, "lanes")
		if !strings.Contains(out, consoletest.LaneA) || !strings.Contains(out, consoletest.LaneB) {
			t.Fatalf("lanes:\n%s", out)
		}
		out, _ = run(0, "lanes", "--json")
		var l struct{ Lanes []admin.LaneCounts }
		if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Lanes) != 2 || l.Lanes[0].Total != 6 {
			t.Fatalf("lanes --json: %v %+v", err, l)
		}
		out, _ = run(0, "workers")
		if !strings.Contains(out, s.Worker) || !strings.Contains(out, "cpu") {
			t.Fatalf("workers:\n%s", out)
		}
		_, errOut := run(1, "lanes", "pause", consoletest.LaneA, "--admin-token-file", tokFile)
		if !strings.Contains(errOut, "no lane state") || !strings.Contains(errOut, "501") {
			t.Fatalf("lanes pause: %s", errOut)
		}
	})

	t.Run("writes", func(t *testing.T) {
		t.Setenv(adminTokenEnv, "")
		_, errOut := run(1, "executions", "cancel", string(s.Eligible))
		if !strings.Contains(errOut, "403") || !strings.Contains(errOut, "--admin-token-file") {
			t.Fatalf("cancel without token: %s", errOut)
		}
		// Every write verb says how to send the token, not only the
		// execution actions.
		if _, errOut := run(1, "lanes", "pause", consoletest.LaneA); !strings.Contains(errOut, "403") || !strings.Contains(errOut, "--admin-token-file") {
			t.Fatalf("lanes pause without token: %s", errOut)
		}
		out, _ := run(0, "executions", "priority", string(s.Eligible), "42", "--admin-token-file", tokFile)
		if !strings.Contains(out, "new=42") {
			t.Fatalf("priority: %s", out)
		}
		run(2, "executions", "priority", string(s.Eligible), "high", "--admin-token-file", tokFile)
		t.Setenv(adminTokenEnv, token)
		// show says what the suspension waits for before it is signalled.
		if out, _ := run(0, "executions", "show", string(s.Suspended)); !strings.Contains(out, "suspension ") || !strings.Contains(out, "waits for") || !strings.Contains(out, `"approve"`) {
			t.Fatalf("show of a suspended execution:\n%s", out)
		}
		out, _ = run(0, "executions", "signal", string(s.Suspended), "approve")
		if !strings.Contains(out, "effect=resume_condition_satisfied") {
			t.Fatalf("signal: %s", out)
		}
		out, _ = run(0, "executions", "cancel", string(s.Eligible), "--reason", "cli test")
		if !strings.Contains(out, "cancel "+string(s.Eligible)) {
			t.Fatalf("cancel: %s", out)
		}
		_, errOut = run(1, "executions", "cancel", string(s.Eligible))
		if !strings.Contains(errOut, "execution_not_active") || !strings.Contains(errOut, "409") {
			t.Fatalf("second cancel: %s", errOut)
		}
		run(0, "executions", "retry", string(s.Failed))
		out, _ = run(0, "executions", "show", string(s.Failed))
		if !strings.Contains(out, "public_state: waiting") || !strings.Contains(out, "replay_count: 1") {
			t.Fatalf("after retry:\n%s", out)
		}
		run(1, "executions", "cancel", "{fp:1}:00000000-0000-4000-8000-000000000001")
	})
}

func TestReadAdminToken(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(adminTokenEnv, " from-env ")
	if tok, err := readAdminToken(""); err != nil || tok != "from-env" {
		t.Fatalf("env: %q %v", tok, err)
	}
	f := filepath.Join(dir, "tok")
	_ = os.WriteFile(f, []byte("from-file\nsecond line\n"), 0o600)
	if tok, err := readAdminToken(f); err != nil || tok != "from-file" {
		t.Fatalf("file: %q %v", tok, err)
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := readAdminToken(empty); err == nil {
		t.Fatal("an empty token file was accepted")
	}
	if _, err := readAdminToken(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing token file was accepted")
	}
}

// TestConsoleCLIOverTLS drives the console verbs against an HTTPS admin
// server signed by a private CA: trusted with --admin-ca, refused
// without it; writes work over TLS with the token.
func TestConsoleCLIOverTLS(t *testing.T) {
	certs := valkeytest.NewCerts(t)
	cert, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	vc := valkeytest.Client(t)
	s := consoletest.Seed(t, vc)
	srv := admin.NewServer(admin.ServerConfig{Addr: "127.0.0.1:0", Backend: vc, AdminToken: "tls-token", Logger: valkeytest.Logger(),
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if !strings.HasPrefix(srv.URL(), "https://") {
		t.Fatalf("admin URL %s", srv.URL())
	}
	code, out, errOut := runCmd(t, "executions", "list", "--state", "failed", "--admin", srv.URL(), "--admin-ca", certs.CA)
	if code != 0 || !strings.Contains(out, string(s.Failed)) {
		t.Fatalf("list over https: %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runCmd(t, "lanes", "--admin", srv.URL())
	if code != 1 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("untrusted CA: %d %s", code, errOut)
	}
	t.Setenv(adminTokenEnv, "tls-token")
	code, out, errOut = runCmd(t, "executions", "cancel", string(s.Eligible), "--admin", srv.URL(), "--admin-ca", certs.CA)
	if code != 0 || !strings.Contains(out, "cancel "+string(s.Eligible)) {
		t.Fatalf("cancel over https: %d\n%s%s", code, out, errOut)
	}
}

// TestAdminTokenFileFromConfig: admin_token_file in fabric.toml sets
// --admin-token-file unless the flag was given.
func TestAdminTokenFileFromConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fabric.toml")
	if err := os.WriteFile(path, []byte("admin_token_file = \"/etc/fabric/admin.token\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{{nil, "/etc/fabric/admin.token"}, {[]string{"--admin-token-file", "/given"}, "/given"}} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		tok := fs.String("admin-token-file", "", "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if _, err := loadRunFile(fs, path); err != nil {
			t.Fatal(err)
		}
		if *tok != tc.want {
			t.Fatalf("args %v: --admin-token-file %q, want %q", tc.args, *tok, tc.want)
		}
	}
}
