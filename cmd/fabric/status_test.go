package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/sdk"
)

// actingPlugins is a host whose one plugin acts on 1000 items a second.
type actingPlugins struct{ start time.Time }

func (a actingPlugins) Plugins() []host.PluginStatus {
	acted := uint32(time.Since(a.start).Milliseconds())
	return []host.PluginStatus{{Name: "pg_edge_cancel_reconciler", Version: "1.0.0", State: host.StateRunning,
		Totals: abi.ScanResult{Acted: acted}}}
}

func (actingPlugins) Started() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestStatusActedPerSecond: `fabric status` reads the admin server twice,
// --sample apart, and shows the plugin's rate (it showed 0.0 always: one
// read has no rate).
func TestStatusActedPerSecond(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 20*time.Second)
	as := admin.NewServer(admin.ServerConfig{Addr: "127.0.0.1:0", Backend: c, Host: actingPlugins{start: time.Now()}})
	if err := as.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(as.Stop)
	code, out, errOut := runCmd(t, "status", "--admin", "http://"+as.Addr().String(), "--sample", "300ms")
	if code != 0 {
		t.Fatalf("status: code %d\n%s", code, errOut)
	}
	m := regexp.MustCompile(`(?m)^pg_edge_cancel_reconciler +1\.0\.0 +running +\d+ +\d+ +([\d.]+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no aligned row for the plugin:\n%s", out)
	}
	if rate, _ := strconv.ParseFloat(m[1], 64); rate < 500 || rate > 2000 {
		t.Fatalf("ACTED/S %s, want about 1000:\n%s", m[1], out)
	}
}

// TestStatusFromPostgres runs `fabric status --postgres-url` against a
// real database holding a waiting and a delayed execution: the same view
// as --valkey-url's, named as `fabric run` names the database. A bad URL,
// an unreachable server and an unmigrated database are clear errors
// (the last naming `fabric migrate`), and no password reaches the output.
func TestStatusFromPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Postgres cluster")
	}
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pc := pgtest.Client(t, postgres.ClientConfig{URL: url})
	ctx := pgtest.Context(t, time.Minute)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "status-pg", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "status-pg", Kind: "k", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "status", "--postgres-url", url, "--sample", "300ms", "--admin", "http://127.0.0.1:1")
	if code != 0 {
		t.Fatalf("status: code %d\n%s\n%s", code, out, errOut)
	}
	// No host answered: the plugins are unknown, not "none loaded".
	for _, want := range []string{"fabric status · postgres: database ", "executions  eligible 1 · delayed 1 ·",
		"(plugins unknown: no host answered at http://127.0.0.1:1;", "throughput  0.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = runCmd(t, "status", "--postgres-url", url, "--sample", "0", "--json", "--admin", "http://127.0.0.1:1")
	var rep admin.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Census == nil || !strings.HasPrefix(rep.Backend, "postgres: database ") ||
		!slices.Contains(rep.Census.Lanes, "status-pg") || !strings.HasPrefix(rep.PluginsUnknown, "no host answered at http://127.0.0.1:1") {
		t.Fatalf("status --json: code %d, census %+v\n%s\n%s", code, rep.Census, out, errOut)
	}

	const pw = "s3cret-pw-7731"
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "no plugins loaded") {
		t.Errorf("status says no plugins loaded where no host answered:\n%s", out)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unmigrated", []string{"--postgres-url", pgtest.NewDatabase(t, false), "--postgres-password-file", pwFile}, 1, "run `fabric migrate"},
		{"unreachable", []string{"--postgres-url", "postgres://fabric:" + pw + "@127.0.0.1:1/db?connect_timeout=5"}, 1, "connection refused"},
		{"bad URL", []string{"--postgres-url", "postgres://fabric:" + pw + "@127.0.0.1:notaport/db"}, 1, "postgres"},
		{"both backends", []string{"--postgres-url", url, "--valkey-url", "redis://127.0.0.1:1"}, 2, "give one backend"},
		{"partitions", []string{"--postgres-url", url, "--partitions", "flow=8"}, 2, "--partitions does not apply with --postgres-url"},
	} {
		code, out, errOut := runCmd(t, append([]string{"status", "--sample", "0", "--admin", "http://127.0.0.1:1"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: code %d, want %d and %q\nstdout:\n%s\nstderr:\n%s", tc.name, code, tc.code, tc.want, out, errOut)
		}
		if strings.Contains(out+errOut, pw) {
			t.Errorf("%s: the password was shown:\n%s\n%s", tc.name, out, errOut)
		}
	}
}
