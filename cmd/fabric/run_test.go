package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
)

// TestRunPipeClosedEarly runs the built binary the way `make run | head`
// does: stdout is a pipe whose reader goes away after a few progress
// lines. fabric must drain, exit 0 and take its redis-server child with
// it.
func TestRunPipeClosedEarly(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "fabric")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "run", "--plugins", "", "--admin-addr", "127.0.0.1:0", "--view", "auto",
		"--rate", "20", "--refresh", "200ms", "--census-interval", "200ms", "--drain-timeout", "60s",
		"--partitions", "flow=8,budget=2,quota=2")
	// A file, not a buffer: Wait must not wait for a copy of stderr that a
	// leaked child would keep open.
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	r, w, err := os.Pipe()
	logs := func() string { b, _ := os.ReadFile(stderr.Name()); return string(b) }
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})

	// Like head: read some lines, then close the pipe.
	sc := bufio.NewScanner(r)
	var lines []string
	pid, progress, rates := 0, 0, 0
	for (progress < 3 || rates < 1) && sc.Scan() {
		l := sc.Text()
		lines = append(lines, l)
		if m := regexp.MustCompile(`redis-server \(pid (\d+),|valkey-server \(pid (\d+),`).FindStringSubmatch(l); m != nil {
			pid, _ = strconv.Atoi(m[1] + m[2])
		}
		if strings.HasPrefix(l, "status ") && strings.Contains(l, "executions eligible=") {
			progress++
		}
		if strings.HasPrefix(l, "run ") && strings.Contains(l, "completed") {
			rates++
		}
	}
	r.Close()
	if pid == 0 || progress < 3 || rates < 1 {
		t.Fatalf("want a server pid, 3 progress lines and a workload rate line; got:\n%s\nstderr:\n%s", strings.Join(lines, "\n"), logs())
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("fabric run exited with %v after its output closed\nstderr:\n%s", waitErr, logs())
		}
	case <-time.After(120 * time.Second):
		t.Fatalf("fabric run still running 120s after its output closed\nstderr:\n%s", logs())
	}
	// fabric reaped its child on the way out: the pid is gone, not a
	// zombie nor an orphan.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("redis-server pid %d still exists after fabric exited (kill 0: %v)", pid, err)
	}
}

func TestRunConfigFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fabric.toml")
	os.WriteFile(path, []byte(`
admin_addr = "127.0.0.1:9999"
log_format = "json"
view = "lines"
[partitions]
flow = 8
budget = 2
quota = 2
[demo]
rate = 7
lanes = ["x", "y"]
[plugins.delayed_promoter]
interval = "250ms"
batch_size = 10
config = { lanes = "x" }
idle_release = "never"
[plugins.unblock]
idle_release = "30s"
`), 0o644)
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	addBackendFlags(fs)
	wf := addWorkloadFlags(fs)
	admin := fs.String("admin-addr", "127.0.0.1:9480", "")
	view := fs.String("view", "auto", "")
	var parts partitionsFlag
	fs.Var(&parts, "partitions", "")
	if err := fs.Parse([]string{"--rate", "3"}); err != nil {
		t.Fatal(err)
	}
	pcs, err := loadRunFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	if *admin != "127.0.0.1:9999" || *view != "lines" || parts.Flow != 8 || parts.Quota != 2 {
		t.Errorf("file values not applied: admin %q view %q partitions %+v", *admin, *view, parts)
	}
	if *wf.rate != 3 || *wf.lanes != "x,y" {
		t.Errorf("rate %v (the flag given must win), lanes %q", *wf.rate, *wf.lanes)
	}
	pc := pcs["delayed_promoter"]
	if pc.Interval != 250*time.Millisecond || pc.BatchSize != 10 || pc.Config["lanes"] != "x" || pc.IdleRelease >= 0 {
		t.Errorf("plugin config %+v", pc)
	}
	if d := pcs["unblock"].IdleRelease; d != 30*time.Second {
		t.Errorf("unblock idle_release %v, want 30s", d)
	}

	t.Run("BadIdleReleaseIsAUsageError", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.toml")
		os.WriteFile(bad, []byte("[plugins.unblock]\nidle_release = \"sometimes\"\n"), 0o644)
		if _, err := loadRunFile(flag.NewFlagSet("run", flag.ContinueOnError), bad); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "plugins.unblock.idle_release") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("UnknownKeyIsAUsageError", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.toml")
		os.WriteFile(bad, []byte("admin_adr = \"x\"\n"), 0o644)
		if _, err := loadRunFile(flag.NewFlagSet("run", flag.ContinueOnError), bad); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "admin_adr") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestFirstHourErrors: each error a newcomer meets names what was wrong
// and what is accepted, once.
func TestFirstHourErrors(t *testing.T) {
	t.Parallel()

	t.Run("LuaLoadWithoutURLRefuses", func(t *testing.T) {
		code, out, errOut := runCmd(t, "lua", "load")
		if code != 2 || out != "" || !strings.Contains(errOut, "--valkey-url is required") {
			t.Fatalf("code %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("BadURLNamesSchemes", func(t *testing.T) {
		for _, tc := range []struct{ url, want string }{
			{"nonsense", "no scheme"},
			{"http://127.0.0.1:6379", `unknown scheme "http"`},
			{"unix+cluster:///tmp/x", `unknown scheme "unix+cluster"`},
		} {
			code, _, errOut := runCmd(t, "lua", "load", "--valkey-url", tc.url)
			if code != 1 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "redis://, rediss://, valkey://") {
				t.Errorf("%s: code %d, stderr %q", tc.url, code, errOut)
			}
		}
	})

	t.Run("MissingFileSaysStatOnce", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.wasm")
		for _, verb := range []string{"validate", "inspect"} {
			code, _, errOut := runCmd(t, "plugins", verb, missing)
			if code != 1 || strings.Count(errOut, "stat ") != 1 || !strings.Contains(errOut, "stat "+missing+": no such file") {
				t.Errorf("plugins %s: code %d, stderr %q", verb, code, errOut)
			}
		}
	})

	t.Run("BadDurationNamesKeyAndValue", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "fabric.toml")
		os.WriteFile(path, []byte("refresh = \"fast\"\n[demo]\nduration = \"soon\"\n"), 0o644)
		code, _, errOut := runCmd(t, "run", "--config", path)
		if code != 2 || !strings.Contains(errOut, `refresh = "fast": not a duration`) {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
	})

	// One log-level and log-format parser for both backends: on Postgres
	// a bad level was taken as warn and --log-format ignored.
	t.Run("BadLogFlagsOnPostgres", func(t *testing.T) {
		for _, args := range [][]string{{"--log-level", "loud"}, {"--log-format", "xml"}} {
			code, _, errOut := runCmd(t, append([]string{"run", "--backend", "postgres", "--duration", "1s", "--plugins", ""}, args...)...)
			if code != 2 || !strings.Contains(errOut, args[0]) {
				t.Errorf("%q: code %d, stderr %q", args, code, errOut)
			}
		}
	})

	t.Run("UnknownPluginSectionNamed", func(t *testing.T) {
		dir := t.TempDir()
		copyStock(t, dir, "delayed_promoter")
		path := filepath.Join(t.TempDir(), "fabric.toml")
		os.WriteFile(path, []byte("[plugins.delayed_promoter]\ninterval = \"1s\"\n[plugins.nosuchplugin]\ninterval = \"1s\"\n"), 0o644)
		code, _, errOut := runCmd(t, "run", "--config", path, "--plugins", dir, "--view", "off", "--duration", "1s",
			"--admin-addr", "", "--partitions", "flow=4,budget=2,quota=2")
		if code != 2 || !strings.Contains(errOut, "[plugins.nosuchplugin] names no plugin") ||
			!strings.Contains(errOut, "plugins there: delayed_promoter") {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
	})
}

// TestStatusFromKeyspace runs `fabric status --valkey-url` against a
// deployment with one execution in a delayed index.
func TestStatusFromKeyspace(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	c := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 20*time.Second)
	raw := c.Raw()
	if err := raw.Do(ctx, raw.B().Sadd().Key("ff:idx:lanes").Member("l").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, raw.B().Zadd().Key("ff:idx:{fp:3}:lane:l:delayed").ScoreMember().ScoreMember(1, "e").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "status", "--valkey-url", srv.URL(), "--sample", "0", "--admin", "http://127.0.0.1:1")
	if code != 0 {
		t.Fatalf("status: code %d\n%s", code, errOut)
	}
	for _, want := range []string{"executions  eligible 0 · delayed 1 ·", "(plugins unknown: no host answered at http://127.0.0.1:1;", "throughput  0.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	code, _, errOut = runCmd(t, "status", "--admin", "http://127.0.0.1:1")
	if code != 1 || !strings.Contains(errOut, "is `fabric run` running?") {
		t.Fatalf("status without a host: code %d, %s", code, errOut)
	}
}

func TestLogFormat(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCmd(t, "lua", "load", "--valkey-url", "unix:///nonexistent/fabric.sock", "--log-format", "xml")
	if code != 2 || !strings.Contains(errOut, "--log-format") {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	b := &backendFlags{logLevel: "info", logFormat: "json"}
	var buf strings.Builder
	b.logOut = &buf
	log, err := b.logger(&cliEnv{})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "plugin", "x")
	if !strings.HasPrefix(buf.String(), `{"time":`) || !strings.Contains(buf.String(), `"plugin":"x"`) {
		t.Fatalf("json log: %q", buf.String())
	}
}

// TestRunOutlivesAdminHangups runs the built binary with stdout on a file
// (line mode, SIGPIPE notified) and sends its admin server 100 requests
// whose clients hang up after the first byte of the answer, as `curl -s
// .../metrics | head -1` does: the run must keep going and keep answering.
func TestRunOutlivesAdminHangups(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fabric")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd := exec.Command(bin, "run", "--plugins", "", "--admin-addr", "127.0.0.1:0", "--view", "lines",
		"--rate", "20", "--refresh", "200ms", "--partitions", "flow=8,budget=2,quota=2")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	logs := func() string {
		o, _ := os.ReadFile(stdout.Name())
		e, _ := os.ReadFile(stderr.Name())
		return "stdout:\n" + string(o) + "\nstderr:\n" + string(e)
	}
	addrRE := regexp.MustCompile(`admin: http://(\S+)/metrics`)
	var addr string
	for deadline := time.Now().Add(90 * time.Second); addr == ""; {
		if m := addrRE.FindStringSubmatch(logs()); m != nil {
			addr = m[1]
			break
		}
		select {
		case <-exited:
			t.Fatalf("fabric run exited before its admin server was up (%v)\n%s", waitErr, logs())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no admin address within 90s\n%s", logs())
		}
	}
	for i := range 100 {
		conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("request %d: %v\n%s", i, err, logs())
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		path := []string{"/metrics", "/status", "/plugins"}[i%3]
		if _, err := conn.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		one := make([]byte, 1)
		if _, err := io.ReadFull(conn, one); err != nil {
			t.Fatalf("request %d: no first byte: %v\n%s", i, err, logs())
		}
		if tc, ok := conn.(*net.TCPConn); ok && i%2 == 0 {
			tc.SetLinger(0) // half of them reset rather than close
		}
		conn.Close()
	}
	// Still running, still answering, still working.
	select {
	case <-exited:
		t.Fatalf("fabric run exited after admin clients hung up (%v)\n%s", waitErr, logs())
	default:
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("healthz after the hang-ups: %v\n%s", err, logs())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz after the hang-ups: %s", resp.Status)
	}
	select {
	case <-exited:
		t.Fatalf("fabric run exited after admin clients hung up (%v)\n%s", waitErr, logs())
	default:
	}
	if strings.Contains(logs(), "output closed") {
		t.Fatalf("the run took an admin hang-up for its own output closing\n%s", logs())
	}
}

// TestStatusShowsRejectedFiles: `fabric status --status-file` lists a file
// the host refused, with its reason, as a row of its own.
func TestStatusShowsRejectedFiles(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	snap := host.Snapshot{Files: []host.FileStatus{{Path: "/p/notwasm.wasm", State: host.StateInvalid,
		Reason: host.RejectNotWasm, Error: "host: not a wasm module"}}}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "status.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "status", "--valkey-url", srv.URL(), "--sample", "0", "--status-file", file)
	if code != 0 {
		t.Fatalf("status: code %d\n%s", code, errOut)
	}
	if !regexp.MustCompile(`(?m)^notwasm\.wasm +- +rejected +not wasm: host: not a wasm module$`).MatchString(out) {
		t.Fatalf("status output lacks the rejected file:\n%s", out)
	}
}
