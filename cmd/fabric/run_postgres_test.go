package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
)

func TestRunPostgresFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		on   bool
		bad  bool
	}{
		{args: nil, on: false},
		{args: []string{"--backend", "postgres"}, on: true},
		{args: []string{"--postgres-url", "postgres://x/db"}, on: true},
		{args: []string{"--backend", "mysql"}, bad: true},
		// A Postgres URL with Valkey chosen is a mistake either way.
		{args: []string{"--postgres-url", "postgres://x/db", "--backend", "valkey"}, bad: true},
		{args: []string{"--migrate"}, bad: true},
		{args: []string{"--backend", "valkey", "--migrate"}, bad: true},
		{args: []string{"--postgres-password-file", "pw"}, bad: true},
		{args: []string{"--backend", "postgres", "--postgres-password-file", "pw"}, bad: true},
		{args: []string{"--postgres-url", "postgres://x/db", "--postgres-password-file", "pw"}, on: true},
		{args: []string{"--postgres-url", "postgres://x/db", "--migrate"}, on: true},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := addRunPostgresFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		on, err := f.enabled(fs)
		if tc.bad {
			if !errors.Is(err, errUsage) {
				t.Fatalf("%v: err = %v", tc.args, err)
			}
			continue
		}
		if err != nil || on != tc.on {
			t.Fatalf("%v: on = %v, %v", tc.args, on, err)
		}
	}
}

// TestRunPostgresRefusesValkeyFlags: a flag that cannot apply on Postgres
// stops the run with a usage error naming it, never silently ignored.
func TestRunPostgresRefusesValkeyFlags(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "fabric.toml")
	if err := os.WriteFile(cfg, []byte("host_id = \"a\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--valkey-url", "redis://127.0.0.1:1"}, "--valkey-url does not apply on Postgres"},
		{[]string{"--partition-leases=false"}, "--partition-leases does not apply on Postgres"},
		{[]string{"--lease-ttl", "5s"}, "--lease-ttl does not apply on Postgres"},
		{[]string{"--waitpoint-hmac-secret", "00112233445566778899aabbccddeeff"}, "--waitpoint-hmac-secret does not apply"},
		{[]string{"--config", cfg}, "--host-id does not apply on Postgres"},
		{[]string{"--postgres-url", "postgres://127.0.0.1:1/db", "--partitions", "flow=8"}, "--partitions does not apply with --postgres-url"},
	} {
		args := append([]string{"run", "--backend", "postgres"}, tc.args...)
		code, out, errOut := runCmd(t, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d, want 2 and %q\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.want, out, errOut)
		}
	}
}

// TestPostgresFlagConflicts: a Postgres flag that a command would not use
// as given — a Postgres URL with Valkey chosen, --migrate on Valkey, a
// password file without the URL it is for, --partitions on a database —
// is a usage error (exit 2, one line saying what to do), on every
// command that takes them, before anything is started or dialled.
func TestPostgresFlagConflicts(t *testing.T) {
	t.Parallel()
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const url = "postgres://fabric@127.0.0.1:1/db"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--postgres-url", url, "--backend", "valkey"}, "--postgres-url names a Postgres database but --backend is valkey: drop --backend valkey"},
		{[]string{"run", "--backend", "valkey", "--postgres-url", url}, "--postgres-url names a Postgres database but --backend is valkey"},
		{[]string{"run", "--migrate"}, "--migrate applies on Postgres only"},
		{[]string{"run", "--postgres-password-file", pw}, "--postgres-password-file applies with --postgres-url only"},
		{[]string{"run", "--backend", "postgres", "--postgres-password-file", pw}, "--postgres-password-file applies with --postgres-url only"},
		{[]string{"status", "--postgres-password-file", pw}, "--postgres-password-file applies with --postgres-url only"},
		{[]string{"migrate", "--postgres-password-file", pw}, "--postgres-password-file applies with --postgres-url only"},
		{[]string{"executions", "stuck", "--valkey-url", "redis://127.0.0.1:1", "--postgres-password-file", pw}, "--postgres-password-file applies with --postgres-url only"},
		{[]string{"executions", "stuck", "--postgres-url", url, "--partitions", "flow=8"}, "--partitions does not apply with --postgres-url"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || !strings.Contains(lines[0], tc.want) || len(lines) != 2 || out != "" {
			t.Errorf("%v: code %d, want 2 and one line with %q\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.want, out, errOut)
		}
	}
}

// TestRunPostgresParity runs `fabric run --backend postgres` as a user
// does and checks what the Valkey run gives: the admin server's /healthz,
// /readyz, /metrics and /status with a census of the executions, `fabric
// status` against it, progress and status lines, JSON logs, a
// [plugins.NAME] section applied, and a Ctrl-C (the run's context
// cancelled, as main's signal handler does) that drains on a context it
// does not cancel: exit 0, the audit finding nothing left behind.
func TestRunPostgresParity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Postgres cluster")
	}
	dir := t.TempDir()
	copyStock(t, dir, "pg_lease_expiry", "pg_delayed_promoter")
	cfg := filepath.Join(t.TempDir(), "fabric.toml")
	if err := os.WriteFile(cfg, []byte(`log_format = "json"
log_level = "info"
[plugins.pg_delayed_promoter]
interval = "250ms"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut := &syncBuffer{}, &syncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	exited := make(chan int, 1)
	go func() {
		exited <- runCLI(ctx, &cliEnv{stdout: out, stderr: errOut}, []string{"run", "--backend", "postgres", "--config", cfg,
			"--plugins", dir, "--admin-addr", "127.0.0.1:0", "--view", "lines", "--refresh", "300ms", "--census-interval", "300ms",
			"--rate", "20", "--mix", "immediate=2,delayed=1,retry=1", "--lanes", "pg-parity", "--partitions", "flow=8,budget=2,quota=2",
			"--drain-timeout", "60s"})
	}()
	var base string
	re := regexp.MustCompile(`admin: (http://\S+)/metrics`)
	valkeytest.Eventually(t, 3*time.Minute, "fabric run --backend postgres prints the admin URL", func() bool {
		select {
		case code := <-exited:
			t.Fatalf("run exited %d early\n%s\n%s", code, out, errOut)
		default:
		}
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			return true
		}
		return false
	})
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(p); code != 200 || !strings.Contains(body, `"ok"`) {
			t.Errorf("%s: %d %s", p, code, body)
		}
	}
	var rep admin.Report
	valkeytest.Eventually(t, 60*time.Second, "/status counts terminal executions", func() bool {
		_, body := get("/status")
		rep = admin.Report{}
		return json.Unmarshal([]byte(body), &rep) == nil && rep.Census != nil && rep.Census.Executions["terminal"] > 0
	})
	if !slices.Contains(rep.Census.Lanes, "pg-parity") || !strings.HasPrefix(rep.Backend, "postgres") {
		t.Errorf("census lanes %v, backend %q", rep.Census.Lanes, rep.Backend)
	}
	var promoter *host.PluginStatus
	for i, p := range rep.Plugins {
		if p.Name == "pg_delayed_promoter" {
			promoter = &rep.Plugins[i]
		}
	}
	if promoter == nil || promoter.IntervalMs != 250 || promoter.State != host.StateRunning {
		t.Errorf("pg_delayed_promoter with [plugins.pg_delayed_promoter] interval 250ms: %+v", promoter)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `fabric_executions{state="terminal"}`) ||
		!strings.Contains(body, `fabric_plugin_cycles_total{plugin="pg_delayed_promoter"}`) {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	code, stdout, stderr := runCmd(t, "status", "--admin", base, "--sample", "0")
	if code != 0 || !strings.Contains(stdout, "pg_delayed_promoter") || !strings.Contains(stdout, "postgres") {
		t.Errorf("fabric status --admin: %d\n%s\n%s", code, stdout, stderr)
	}
	valkeytest.Eventually(t, time.Minute, "a progress line and a status line", func() bool {
		o := out.String()
		return strings.Contains(o, "run  ") && strings.Contains(o, " completed ") && strings.Contains(o, "status ")
	})
	stop() // Ctrl-C
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("run exited %d after Ctrl-C\n%s\n%s", code, out, errOut)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("run did not stop after Ctrl-C\n%s", out)
	}
	o := out.String()
	for _, want := range []string{"violations: 0", "demo: stopped submitting; draining", "executions by state: completed=",
		"status ", "run  ", "plugin pg_delayed_promoter", "unfinished 0;"} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	if !strings.Contains(errOut.String(), `{"time":`) {
		t.Errorf("--log-format json (from --config) did not reach the logs:\n%s", errOut)
	}
}

// TestRunPostgresNotMigrated: `fabric run --postgres-url` on a database
// without the schema refuses to start, naming `fabric migrate` (and
// --migrate), instead of failing on a missing relation; with --migrate it
// migrates and runs, and then runs without it.
func TestRunPostgresNotMigrated(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)
	args := []string{"run", "--postgres-url", url, "--plugins", "", "--duration", "500ms", "--rate", "20", "--mix", "immediate=1",
		"--lanes", "not-migrated", "--drain-timeout", "30s"}
	code, out, errOut := runCmd(t, args...)
	if code != 1 || !strings.Contains(errOut, "database not migrated") || !strings.Contains(errOut, "run `fabric migrate") ||
		!strings.Contains(errOut, "--migrate") || strings.Contains(errOut+out, "does not exist") {
		t.Fatalf("unmigrated: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	want := fmt.Sprintf("schema version %d", postgres.LatestVersion())
	code, out, errOut = runCmd(t, append(args, "--migrate")...)
	if code != 0 || !strings.Contains(out, want) || !regexp.MustCompile(`demo: [1-9]\d* executions \(immediate=[1-9]\d*\) in \S+; terminal: completed=[1-9]\d*; unfinished 0;`).MatchString(out) {
		t.Fatalf("--migrate: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = runCmd(t, args...)
	if code != 0 || !strings.Contains(out, want) || strings.Contains(out, "applied") {
		t.Fatalf("migrated: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "run", "--migrate", "--duration", "1s"); code != 2 || !strings.Contains(errOut, "--migrate applies on Postgres only") {
		t.Fatalf("--migrate on Valkey: code %d\n%s", code, errOut)
	}
}

// TestRunPostgresDemoEveryKind runs the one demo workload on Postgres
// with every work kind — delayed, retried, suspended until signalled,
// diamond flows — beside the pg_* scanners it needs, and checks the drain:
// every execution completed, the audit finding nothing left behind, the
// suspended ones resumed.
func TestRunPostgresDemoEveryKind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Postgres cluster")
	}
	t.Parallel()
	dir := t.TempDir()
	copyStock(t, dir, "pg_lease_expiry", "pg_delayed_promoter", "pg_dependency_reconciler")
	code, out, errOut := runCmd(t, "run", "--backend", "postgres", "--plugins", dir, "--admin-addr", "", "--view", "off",
		"--duration", "2s", "--rate", "30", "--mix", "immediate=1,delayed=1,retry=1,suspend=1,dag=1", "--lanes", "pg-every-kind",
		"--partitions", "flow=4,budget=2,quota=2", "--drain-timeout", "90s")
	if code != 0 {
		t.Fatalf("code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`demo: (\d+) executions \(([^)]*)\) in \S+; terminal: completed=(\d+); unfinished 0; workers: .* (\d+) suspended, (\d+) resumed, (\d+) delayed`).FindStringSubmatch(out)
	if m == nil || m[1] != m[3] || m[1] == "0" {
		t.Fatalf("summary: not every execution completed\n%s\n%s", out, errOut)
	}
	// A slow machine may submit few items: a kind submitted must have
	// done its part.
	if strings.Contains(m[2], "suspend=") && (m[4] == "0" || m[5] == "0") {
		t.Errorf("suspend items submitted but %s suspended, %s resumed\n%s", m[4], m[5], out)
	}
	if strings.Contains(m[2], "delayed=") && m[6] == "0" {
		t.Errorf("delayed items submitted but none parked by its handler\n%s", out)
	}
	if !strings.Contains(out, "violations: 0") || strings.Contains(out, "warning: no pg_") {
		t.Errorf("output:\n%s", out)
	}
}

// TestRunPostgresSafetyInterval: with completion wake-ups, the run sweeps
// pg_dependency_reconciler every postgres.DependencySafetyInterval, not
// at its stock 1 s, unless the config file sets an interval; the
// backend's config entries stay under the file's.
func TestRunPostgresSafetyInterval(t *testing.T) {
	t.Parallel()
	const name = "pg_dependency_reconciler"
	o := hostOptions{
		defaults:  map[string]map[string]string{name: {"stale_ms": "0"}},
		intervals: map[string]time.Duration{name: postgres.DependencySafetyInterval},
	}
	got := o.pluginConfigs()[name]
	if got.Interval != postgres.DependencySafetyInterval || got.Config["stale_ms"] != "0" {
		t.Fatalf("no config file: %+v, want interval %s and stale_ms 0", got, postgres.DependencySafetyInterval)
	}
	o.plugins = map[string]host.PluginConfig{name: {Interval: 2 * time.Second, Config: map[string]string{"stale_ms": "50"}}}
	got = o.pluginConfigs()[name]
	if got.Interval != 2*time.Second || got.Config["stale_ms"] != "50" {
		t.Fatalf("config file's interval 2s, stale_ms 50: %+v", got)
	}
}
