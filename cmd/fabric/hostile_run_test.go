package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/host"
)

// hostileRunSeconds is how long TestHostileRun keeps the hostile set
// beside the stock set: FABRIC_HOSTILE_SECONDS, 30 by default (make test);
// the 3-minute run is FABRIC_HOSTILE_SECONDS=180.
func hostileRunSeconds(t *testing.T) time.Duration {
	s := os.Getenv("FABRIC_HOSTILE_SECONDS")
	if s == "" {
		return 30 * time.Second
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("FABRIC_HOSTILE_SECONDS=%q: want a positive number of seconds", s)
	}
	return time.Duration(n) * time.Second
}

// TestHostileRun runs the built `fabric run` binary — its own private
// server, the demo workload, the stock Valkey plugin set — with every
// hostile plugin of hostileSet in its plugin directory from the start,
// granted what each requests (but selfgrant and bigmem), and checks what
// an operator sees from outside the process: the host becomes healthy,
// answers /healthz within a second at every poll for the whole window (a
// plugin call that held the Go runtime's stop-the-world, a decoder or a
// file that took the memory, would stop it answering), and stops on
// SIGINT within 10 s. TestHostileSoak checks each plugin's outcome, the
// stock cadence and the memory bound in-process.
func TestHostileRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the hostile set")
	}
	window := hostileRunSeconds(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The stock Valkey set with its signatures, the key beside the
	// directory (fabric run trusts it there by default).
	plugins := filepath.Join(dir, "plugins")
	stock, _ := filepath.Glob(filepath.Join("..", "..", "bin", "plugins", "*.wasm"))
	var names []string
	for _, p := range stock {
		if name := strings.TrimSuffix(filepath.Base(p), ".wasm"); !strings.HasPrefix(name, "pg_") {
			names = append(names, name)
		}
	}
	if len(names) < 10 {
		t.Fatalf("stock set not built (run `make plugins`): %v", names)
	}
	copyStock(t, plugins, names...)
	cache := ""
	if base, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(base, "fabric", "wazero")
	}
	policy := hostilePolicy(t, cache)
	var conf strings.Builder
	for _, hw := range hostileSet {
		install(t, fixturePath(t, hw.file), filepath.Join(plugins, hw.fileName()))
		if hw.plugin == "" {
			continue
		}
		if g, ok := policy.Plugins[hw.plugin]; ok {
			conf.WriteString(grantTable(hw.plugin, g))
		}
	}
	conf.WriteString("[plugins.legacyptr.config]\nlie = \"1\"\n")
	confPath := filepath.Join(dir, "fabric.toml")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--plugins", plugins, "--config", confPath, "--admin-addr", "127.0.0.1:0", "--view", "lines",
		"--rate", "30", "--refresh", "1s", "--partitions", "flow=8,budget=2,quota=2", "--cache-dir", cache}
	out := startLogged(t, dir, bin, args...)
	addr := out.waitFor(t, regexp.MustCompile(`admin: http://(\S+)/metrics`), 3*time.Minute)

	client := &http.Client{Timeout: time.Second}
	healthy := func() error {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	// Healthy first (loading twenty files, compiled under no race
	// detector here, takes seconds), then throughout the window.
	for deadline := time.Now().Add(2 * time.Minute); healthy() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not OK within 2 min of the admin server: %v\n%s", healthy(), out.logs())
		}
		out.pause(t, 200*time.Millisecond)
	}
	start := time.Now()
	polls, worst := 0, time.Duration(0)
	for time.Since(start) < window {
		t0 := time.Now()
		if err := healthy(); err != nil {
			t.Fatalf("/healthz failed %s into the hostile run (poll %d): %v\n%s", time.Since(start).Round(time.Millisecond), polls, err, out.logs())
		}
		worst = max(worst, time.Since(t0))
		polls++
		out.pause(t, 250*time.Millisecond)
	}
	t.Logf("/healthz answered %d polls over %s beside the hostile set; slowest %s", polls, window, worst.Round(time.Millisecond))

	// Every stock plugin runs (granted: its signature is trusted) and every
	// hostile file was seen: a row in /plugins, by plugin or file.
	resp, err := client.Get("http://" + addr + "/plugins")
	if err != nil {
		t.Fatalf("/plugins: %v", err)
	}
	var rows []host.PluginStatus
	err = json.NewDecoder(resp.Body).Decode(&rows)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("/plugins: %v", err)
	}
	for _, name := range names {
		if !slices.ContainsFunc(rows, func(r host.PluginStatus) bool {
			return r.Name == name && r.State != host.StateRejected && r.State != host.StateQuarantined
		}) {
			t.Errorf("stock plugin %s is not running beside the hostile set", name)
		}
	}
	for _, hw := range hostileSet {
		if !slices.ContainsFunc(rows, func(r host.PluginStatus) bool {
			return (hw.plugin != "" && r.Name == hw.plugin) || r.Name == hw.fileName()
		}) {
			t.Errorf("hostile fixture %s (%s) has no row in /plugins", hw.file, hw.fileName())
		}
	}

	stopAt := time.Now()
	if err := out.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.exited:
		t.Logf("stopped %s after SIGINT", time.Since(stopAt).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("fabric run did not stop within 10 s of SIGINT\n%s", out.logs())
	}
}

// grantTable is g as fabric.toml's [plugins.NAME.grant] table.
func grantTable(name string, g host.Grant) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[plugins.%s.grant]\n", name)
	for _, kv := range []struct {
		k string
		v []string
	}{{"fcall", g.FCall}, {"read", g.Read}, {"write", g.Write}, {"sql", g.SQL}} {
		q := make([]string, len(kv.v))
		for i, s := range kv.v {
			q[i] = strconv.Quote(s)
		}
		fmt.Fprintf(&b, "%s = [%s]\n", kv.k, strings.Join(q, ", "))
	}
	fmt.Fprintf(&b, "cross_partition = %t\n", g.CrossPartition)
	for _, kv := range []struct {
		k string
		v int64
	}{{"max_pages", int64(g.MaxPages)}, {"timeout_ms", int64(g.TimeoutMs)}, {"host_calls_per_second", g.HostCallsPerSecond}} {
		if kv.v != 0 {
			fmt.Fprintf(&b, "%s = %d\n", kv.k, kv.v)
		}
	}
	return b.String()
}

// loggedRun is a subprocess whose stdout and stderr go to files.
type loggedRun struct {
	cmd            *exec.Cmd
	stdout, stderr string
	exited         chan struct{}
	err            error
}

// startLogged starts bin with args, its output in files under dir; the
// test's cleanup kills it if it still runs.
func startLogged(t *testing.T, dir, bin string, args ...string) *loggedRun {
	t.Helper()
	r := &loggedRun{stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr"), exited: make(chan struct{})}
	so, err := os.Create(r.stdout)
	if err != nil {
		t.Fatal(err)
	}
	se, err := os.Create(r.stderr)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(bin, args...)
	r.cmd.Stdout, r.cmd.Stderr = so, se
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); so.Close(); se.Close(); close(r.exited) }()
	t.Cleanup(func() {
		select {
		case <-r.exited:
			return
		default:
		}
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.exited
	})
	return r
}

// logs is the output so far, the last 8 KiB of each stream.
func (r *loggedRun) logs() string {
	tail := func(p string) string {
		b, _ := os.ReadFile(p)
		if len(b) > 8<<10 {
			b = b[len(b)-8<<10:]
		}
		return string(b)
	}
	return "stdout:\n" + tail(r.stdout) + "\nstderr:\n" + tail(r.stderr)
}

// waitFor waits until stdout or stderr matches re and returns its first
// group; fails the test if the process exits first or d passes.
func (r *loggedRun) waitFor(t *testing.T, re *regexp.Regexp, d time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if m := re.FindStringSubmatch(r.logs()); m != nil {
			return m[1]
		}
		select {
		case <-r.exited:
			t.Fatalf("exited (%v) before its output matched %s\n%s", r.err, re, r.logs())
		case <-ctx.Done():
			t.Fatalf("no output matching %s within %s\n%s", re, d, r.logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pause waits d, failing the test if the process exits meanwhile.
func (r *loggedRun) pause(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-r.exited:
		t.Fatalf("fabric run exited (%v)\n%s", r.err, r.logs())
	case <-time.After(d):
	}
}
