package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// startRun runs the CLI in-process in the background; wait returns its
// exit code once it has finished.
func startRun(t *testing.T, args ...string) (out, errb *syncBuffer, wait func() int) {
	t.Helper()
	out, errb = &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- runCLI(context.Background(), &cliEnv{stdout: out, stderr: errb}, args) }()
	code, finished := 0, false
	wait = func() int {
		if !finished {
			select {
			case code = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("fabric %s did not finish within 2m\nstdout:\n%s\nstderr:\n%s", args[0], out, errb)
			}
			finished = true
		}
		return code
	}
	t.Cleanup(func() { wait() })
	return out, errb, wait
}

// adminAddr polls a run's output for its admin server address.
func adminAddr(t *testing.T, out, errb *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`admin: http://(\S+)/metrics`)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("no admin address within 60s\nstdout:\n%s\nstderr:\n%s", out, errb)
	return ""
}

// TestSecretsNeverShown runs `fabric run` on a redis-server that requires
// a password given in the URL, with debug logs, and reads everything it
// shows: its output and logs, /status, /plugins, /metrics, `fabric status`
// from the admin server and from the keyspace, and the errors of a dead
// backend and of a malformed URL. The password appears in none of them;
// the redacted URL (user and host kept) does.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	pw := "s3cret-" + randomHex(8)
	srv := valkeytest.NewTCPServer(t, "--requirepass", pw)
	url := "redis://:" + pw + "@" + srv.TCPAddr()
	redacted := "redis://:xxxxx@" + srv.TCPAddr()

	out, errb, wait := startRun(t, "run", "--valkey-url", url, "--plugins", "", "--duration", "2s", "--rate", "20",
		"--mix", "immediate=1", "--admin-addr", "127.0.0.1:0", "--view", "lines", "--refresh", "200ms",
		"--census-interval", "200ms", "--log-level", "debug", "--partitions", "flow=8,budget=2,quota=2")
	addr := adminAddr(t, out, errb)
	seen := map[string]string{}
	for _, path := range []string{"/status", "/plugins", "/metrics", "/healthz", "/readyz"} {
		_, seen[path] = httpGet(t, "http://"+addr+path)
	}
	for _, args := range [][]string{
		{"status", "--admin", "http://" + addr},
		{"status", "--admin", "http://" + addr, "--json"},
		{"status", "--valkey-url", url, "--sample", "0", "--admin", "http://" + addr},
		{"status", "--valkey-url", url, "--sample", "0", "--json", "--admin", "http://" + addr},
	} {
		code, o, e := runCmd(t, args...)
		if code != 0 {
			t.Fatalf("fabric %s: code %d\n%s\n%s", strings.Join(args, " "), code, o, e)
		}
		seen["fabric "+strings.Join(args, " ")] = o + e
	}
	if code := wait(); code != 0 {
		t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	seen["run stdout"], seen["run stderr"] = out.String(), errb.String()

	// A backend that is not there, and a URL that does not parse.
	dead := "redis://alice:" + pw + "@127.0.0.1:" + strconv.Itoa(valkeytest.FreePort(t))
	code, o, e := runCmd(t, "lua", "load", "--valkey-url", dead)
	if code != 1 || !strings.Contains(e, "redis://alice:xxxxx@127.0.0.1") {
		t.Errorf("dead backend: code %d, stderr %q", code, e)
	}
	seen["dead backend"] = o + e
	code, o, e = runCmd(t, "lua", "load", "--valkey-url", "redis://:"+pw+"@127.0.0.1:port")
	if code != 1 || !strings.Contains(e, "parse url") {
		t.Errorf("malformed URL: code %d, stderr %q", code, e)
	}
	seen["malformed url"] = o + e

	for where, text := range seen {
		if strings.Contains(text, pw) {
			t.Errorf("%s shows the password:\n%s", where, text)
		}
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	if want := "fabric " + Version + " on " + redacted; first != want {
		t.Errorf("first line %q, want %q", first, want)
	}
	var st struct{ Backend string }
	if err := json.Unmarshal([]byte(seen["/status"]), &st); err != nil || st.Backend != redacted {
		t.Errorf("/status does not name the redacted backend %s:\n%s", redacted, seen["/status"])
	}
	if !strings.Contains(out.String(), "executions by state: completed=") {
		t.Errorf("the run did not work through the password:\n%s", out)
	}
}
