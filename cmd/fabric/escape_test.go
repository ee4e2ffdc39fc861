package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/admin/consoletest"
	"github.com/fabric-host/fabric/sdk"
)

// hostile is a kind (and payload and tag) a worker could write: a screen
// clear, a window-title escape, a C1 CSI and a right-to-left override.
const hostile = "evil\x1b[2J\x1b]0;owned\x07\u009b31m\u202ekind"

// rawControl reports a control character that would act on a terminal.
func rawControl(s string) bool {
	return strings.ContainsAny(s, "\x1b\x07\u009b\u202e\u202c\u2066\u2069\x7f")
}

// TestExecutionsPrintEscaped: `fabric executions list` and `show` print
// a kind, payload and tags that carry escape sequences escaped, and
// --json keeps the same data with \u escapes.
func TestExecutionsPrintEscaped(t *testing.T) {
	addr, s := consoleHost(t, "escape-token")
	ctx := valkeytest.Context(t, time.Minute)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: s.VC, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(ctx, hostile, []byte(`{"x":"`+hostile+`"}`), sdk.WithLane(consoletest.LaneA),
		sdk.WithDelay(time.Hour), sdk.WithTags(map[string]string{"t\x1b[1m": hostile}))
	if err != nil {
		t.Fatal(err)
	}
	escaped := `evil\x1b[2J\x1b]0;owned\a\u009b31m\u202ekind`
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCmd(t, append(args, "--admin", addr)...)
		if code != 0 {
			t.Fatalf("fabric %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		if rawControl(out) || rawControl(errOut) {
			t.Fatalf("fabric %s printed a raw control character:\n%q", strings.Join(args, " "), out)
		}
		return out
	}
	if out := run("executions", "list", "--lane", consoletest.LaneA, "--state", "delayed"); !strings.Contains(out, escaped) {
		t.Fatalf("list does not show the kind escaped (%s):\n%s", escaped, out)
	}
	out := run("executions", "show", string(id))
	if !strings.Contains(out, "execution_kind: "+escaped) || !strings.Contains(out, `"x":"`+escaped) {
		t.Fatalf("show does not show the kind and payload escaped:\n%s", out)
	}
	var d admin.ExecutionDetail
	if err := json.Unmarshal([]byte(run("executions", "show", string(id), "--json")), &d); err != nil || d.Core["execution_kind"] != hostile {
		t.Fatalf("show --json: %v, kind %q, want the stored kind", err, d.Core["execution_kind"])
	}
}

// TestPeriodicPrintsEscaped: a schedule's kind and lane, read from the
// deployment, are printed escaped by `fabric periodic add` and `list`.
func TestPeriodicPrintsEscaped(t *testing.T) {
	t.Parallel()
	url := valkeytest.NewServer(t).URL()
	for _, args := range [][]string{
		{"periodic", "add", "--valkey-url", url, "--every", "90s", "--kind", hostile, "nightly"},
		{"periodic", "list", "--valkey-url", url},
		{"periodic", "list", "--valkey-url", url, "--json"},
	} {
		code, out, errOut := runCmd(t, args...)
		if code != 0 || rawControl(out) || rawControl(errOut) || !strings.Contains(out, "evil") {
			t.Fatalf("fabric %s: exit %d, raw control characters or no kind:\n%q\n%q", strings.Join(args[:2], " "), code, out, errOut)
		}
	}
}

// TestPluginsListPrintsEscaped: a plugin's name, version and reason in a
// status file (from a plugin's manifest and faults) are printed escaped
// by `fabric plugins list --status`, as table and as JSON.
func TestPluginsListPrintsEscaped(t *testing.T) {
	t.Parallel()
	snap := host.Snapshot{At: time.Now(), Stopped: true, Plugins: []host.PluginStatus{{Name: "p" + hostile, Version: hostile,
		State: host.StateQuarantined, Reason: "trap: " + hostile}},
		Files: []host.FileStatus{{Path: "/x/" + hostile + ".wasm", State: host.StateInvalid, Error: hostile}}}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "status.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"plugins", "list", "--status", f}, {"plugins", "list", "--status", f, "--json"}} {
		code, out, errOut := runCmd(t, args...)
		if code != 0 || rawControl(out) || rawControl(errOut) || !strings.Contains(out, "evil") {
			t.Fatalf("%q: exit %d, raw control characters or no name:\n%q\n%q", args, code, out, errOut)
		}
	}
}
