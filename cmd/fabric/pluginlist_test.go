package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// TestWritePluginListAligns checks the start-up plugin list keeps its
// columns in line when a name is longer than the others (the pg_* names
// once pushed their rows out) and leaves no trailing blanks.
func TestWritePluginListAligns(t *testing.T) {
	var b strings.Builder
	writePluginList(&b, []host.PluginStatus{
		{Name: "unblock", Version: "1.0.0", State: host.StateRunning},
		{Name: "pg_edge_cancel_reconciler", Version: "1.0.0", State: "disabled", Reason: "needs Postgres"},
		{Name: "delayed_promoter", Version: "1.0.10", State: host.StateRunning},
	})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", b.String())
	}
	col := -1
	for _, l := range lines {
		if l != strings.TrimRight(l, " ") {
			t.Errorf("trailing blanks in %q", l)
		}
		i := strings.Index(l, "1.0.")
		if col == -1 {
			col = i
		} else if i != col {
			t.Errorf("version column at %d in %q, want %d:\n%s", i, l, col, b.String())
		}
	}
	if !strings.HasSuffix(lines[1], "disabled needs Postgres") {
		t.Errorf("state and reason: %q", lines[1])
	}
}

// TestPluginsListStatusOfStoppedHost: `fabric plugins list --status`
// says when the status file's host is not running, with the last state
// it knew: a host that stopped writes its plugins as they ended (it wrote
// an empty list, which printed only the header), and one whose process
// is gone is named.
func TestPluginsListStatusOfStoppedHost(t *testing.T) {
	t.Parallel()
	dir, status := t.TempDir(), filepath.Join(t.TempDir(), "status.json")
	b, err := os.ReadFile(fixture(t, "healthy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "healthy.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: defaultCacheDir(), StatusFile: status, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-h.Started()
	code, out, errOut := runCmd(t, "plugins", "list", "--status", status)
	if code != 0 || !strings.Contains(out, "healthy") || strings.Contains(out, "not running") {
		t.Fatalf("running host: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	h.Stop()
	h.Close(context.Background())
	code, out, errOut = runCmd(t, "plugins", "list", "--status", status)
	if code != 0 || !strings.HasPrefix(out, "host not running: it stopped;") || !strings.Contains(out, "healthy") || !strings.Contains(out, string(host.StateStopped)) {
		t.Fatalf("stopped host: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A host killed before it could say so: its process is gone.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	name, _ := os.Hostname()
	snap := host.Snapshot{At: time.Now(), PID: cmd.ProcessState.Pid(), Hostname: name,
		Plugins: []host.PluginStatus{{Name: "lease_expiry", Version: "1.0.0", State: host.StateRunning}}}
	raw, _ := json.Marshal(snap)
	if err := os.WriteFile(status, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCmd(t, "plugins", "list", "--status", status)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("host not running: its process %d is gone", snap.PID)) || !strings.Contains(out, "lease_expiry") {
		t.Fatalf("killed host: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A live process (this test's) is not said to be gone.
	snap.PID = os.Getpid()
	raw, _ = json.Marshal(snap)
	if err := os.WriteFile(status, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, _ = runCmd(t, "plugins", "list", "--status", status); code != 0 || strings.Contains(out, "not running") {
		t.Fatalf("live host: exit %d, stdout %q", code, out)
	}
}

// TestPluginsPrewarm: `fabric plugins prewarm` compiles into the cache
// what it lacks and says so; --check lists what the cache lacks and fails.
func TestPluginsPrewarm(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	healthy := fixture(t, "healthy")
	code, out, errOut := runCmd(t, "plugins", "prewarm", "--check", "--tests", "--cache-dir", empty, healthy)
	if code != 1 || !strings.Contains(out, "not compiled: "+healthy) || !strings.Contains(errOut, "lacks 1 of 1") {
		t.Fatalf("--check on an empty cache: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The shared cache (a test binary's entries: this one's): compiled
	// once per machine, by the prewarm of `make plugins` or here.
	cache := defaultCacheDir()
	code, out, errOut = runCmd(t, "plugins", "prewarm", "--cache-dir", cache, healthy)
	if code != 0 || !strings.HasPrefix(out, "prewarm: ") {
		t.Fatalf("prewarm: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCmd(t, "plugins", "prewarm", "--check", "--tests", "--cache-dir", cache, healthy)
	if code != 0 || out != "" {
		t.Fatalf("--check after the prewarm: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ = runCmd(t, "plugins", "prewarm", "--cache-dir", cache, healthy); code != 0 || out != "prewarm: all 1 files compiled already\n" {
		t.Fatalf("second prewarm: exit %d, stdout %q", code, out)
	}
	if code, _, errOut = runCmd(t, "plugins", "prewarm", "--tests", healthy); code != 2 {
		t.Fatalf("--tests without --check: exit %d, stderr %q", code, errOut)
	}
}

// TestPluginsPrewarmInterrupted: a prewarm whose context is done (SIGINT,
// SIGTERM) compiles nothing more and says it was interrupted; it went on
// compiling every file it lacked, seconds each.
func TestPluginsPrewarmInterrupted(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	files := []string{fixture(t, "healthy"), fixture(t, "swap_v1"), fixture(t, "swap_v2")}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := runCLI(ctx, &cliEnv{stdout: &out, stderr: &errb}, append([]string{"plugins", "prewarm", "--cache-dir", cache}, files...))
	if code != 1 || !strings.Contains(errb.String(), "prewarm interrupted: context canceled") {
		t.Fatalf("prewarm with its context done: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	for _, f := range files {
		if held, err := host.CacheHolds(cache, f, true); err != nil || held {
			t.Fatalf("the cache holds %s (%v, %v): it was compiled", f, held, err)
		}
	}
}
