package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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

// TestRunWithACLUser runs the host with the delayed_promoter plugin as an
// ACL user without @dangerous commands (but INFO and CONFIG GET/SET)
// whose user and password file come from fabric.toml, then
// `fabric lua load` with flags and `fabric status` with the password in
// the environment; wrong or missing passwords are clear errors that
// quote no password.
func TestRunWithACLUser(t *testing.T) {
	t.Parallel()
	defaultPW, alicePW := "default-"+randomHex(6), "alice-"+randomHex(6)
	// alice has the least a host needs: every key, channel and data
	// command, but none of @dangerous except INFO (the cluster-mode check)
	// and CONFIG GET/SET (keyspace events for the due-timer wake-ups).
	srv := valkeytest.NewTCPServer(t, "--requirepass", defaultPW, "--user", "alice", "on", ">"+alicePW, "~*", "&*", "+@all",
		"-@dangerous", "+info", "+config|get", "+config|set")
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	pwFile, wrongFile := filepath.Join(dir, "alice.pw"), filepath.Join(dir, "wrong.pw")
	for path, content := range map[string]string{
		pwFile:    alicePW + "\n",
		wrongFile: "not-" + alicePW + "\n",
		filepath.Join(dir, "fabric.toml"): fmt.Sprintf("valkey_url = %q\nvalkey_user = \"alice\"\nvalkey_password_file = %q\n",
			"redis://"+srv.TCPAddr(), pwFile),
	} {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyStock(t, plugins, "delayed_promoter")
	var shown strings.Builder
	code, out, errOut := runCmd(t, "run", "--config", filepath.Join(dir, "fabric.toml"), "--plugins", plugins,
		"--duration", "1s", "--rate", "40", "--mix", "immediate=1,delayed=1", "--admin-addr", "", "--log-level", "debug",
		"--partitions", "flow=16,budget=4,quota=4")
	shown.WriteString(out + errOut)
	if code != 0 {
		t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`plugin delayed_promoter \S+: .* acted (\d+), errors 0`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" || !strings.Contains(out, "unfinished 0") {
		t.Fatalf("the host did not work as alice:\n%s", out)
	}

	code, out, errOut = runCmd(t, "lua", "load", "--valkey-url", "redis://"+srv.TCPAddr(), "--valkey-user", "alice",
		"--valkey-password-file", pwFile)
	shown.WriteString(out + errOut)
	if code != 0 || !strings.Contains(out, "flowfabric library") {
		t.Fatalf("lua load as alice: code %d\n%s%s", code, out, errOut)
	}
	env := func(k string) string {
		return map[string]string{envValkeyPassword: defaultPW}[k]
	}
	var o, e syncBuffer
	code = runCLI(context.Background(), &cliEnv{stdout: &o, stderr: &e, getenv: env},
		[]string{"status", "--valkey-url", "redis://" + srv.TCPAddr(), "--sample", "0", "--admin", "", "--partitions", "flow=16,budget=4,quota=4"})
	shown.WriteString(o.String() + e.String())
	if code != 0 || !strings.Contains(o.String(), "executions") {
		t.Fatalf("status with $%s: code %d\n%s%s", envValkeyPassword, code, o.String(), e.String())
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--valkey-user", "alice", "--valkey-password-file", wrongFile}, `authentication refused by redis://` + srv.TCPAddr() + ` for user "alice"`},
		{[]string{"--valkey-password-file", pwFile}, `for user "default": wrong password`},
		{nil, "requires authentication"},
		{[]string{"--valkey-password-file", filepath.Join(dir, "absent")}, "--valkey-password-file"},
	} {
		code, out, errOut := runCmd(t, append([]string{"lua", "load", "--valkey-url", "redis://" + srv.TCPAddr()}, c.args...)...)
		shown.WriteString(out + errOut)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("lua load %v: code %d, want an error with %q:\n%s", c.args, code, c.want, errOut)
		}
	}
	for _, pw := range []string{defaultPW, alicePW} {
		if strings.Contains(shown.String(), pw) {
			t.Errorf("a password was shown:\n%s", shown.String())
		}
	}
}

// TestRunOverTLS runs the host with the delayed_promoter plugin over TLS
// only (the server has no plain TCP port and verifies client
// certificates), its CA and client certificate from fabric.toml and its
// password from the environment; then `fabric status` over TLS with
// flags. A CA that did not sign the server's certificate is a clear
// error.
func TestRunOverTLS(t *testing.T) {
	t.Parallel()
	pw := "tls-" + randomHex(6)
	certs := valkeytest.NewCerts(t)
	_, addr := valkeytest.NewTLSServer(t, certs, true, "--requirepass", pw)
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	os.MkdirAll(plugins, 0o755)
	copyStock(t, plugins, "delayed_promoter")
	toml := fmt.Sprintf("valkey_url = %q\nvalkey_tls_ca = %q\nvalkey_tls_cert = %q\nvalkey_tls_key = %q\n",
		"rediss://"+addr, certs.CA, certs.ClientCert, certs.ClientKey)
	if err := os.WriteFile(filepath.Join(dir, "fabric.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string { return map[string]string{envValkeyPassword: pw}[k] }
	run := func(args ...string) (int, string) {
		var o, e syncBuffer
		code := runCLI(context.Background(), &cliEnv{stdout: &o, stderr: &e, getenv: env}, args)
		if strings.Contains(o.String()+e.String(), pw) {
			t.Errorf("fabric %s showed the password:\n%s%s", args[0], o.String(), e.String())
		}
		return code, o.String() + e.String()
	}
	code, out := run("run", "--config", filepath.Join(dir, "fabric.toml"), "--plugins", plugins,
		"--duration", "1s", "--rate", "40", "--mix", "immediate=1,delayed=1", "--admin-addr", "",
		"--partitions", "flow=16,budget=4,quota=4")
	if code != 0 {
		t.Fatalf("run over TLS: code %d\n%s", code, out)
	}
	m := regexp.MustCompile(`plugin delayed_promoter \S+: .* acted (\d+), errors 0`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" || !strings.Contains(out, "unfinished 0") || !strings.Contains(out, "on rediss://"+addr) {
		t.Fatalf("the host did not work over TLS:\n%s", out)
	}
	tlsFlags := []string{"--valkey-tls-ca", certs.CA, "--valkey-tls-cert", certs.ClientCert, "--valkey-tls-key", certs.ClientKey}
	code, out = run(append([]string{"status", "--valkey-url", "rediss://" + addr, "--sample", "0", "--admin", "",
		"--partitions", "flow=16,budget=4,quota=4"}, tlsFlags...)...)
	if code != 0 || !strings.Contains(out, "executions") {
		t.Fatalf("status over TLS: code %d\n%s", code, out)
	}
	code, out = run(append([]string{"executions", "stuck", "--valkey-url", "rediss://" + addr, "--partitions", "flow=16,budget=4,quota=4"}, tlsFlags...)...)
	if code != 0 {
		t.Fatalf("executions stuck over TLS: code %d\n%s", code, out)
	}
	other := valkeytest.NewCerts(t)
	code, out = run("lua", "load", "--valkey-url", "rediss://"+addr, "--valkey-tls-ca", other.CA,
		"--valkey-tls-cert", certs.ClientCert, "--valkey-tls-key", certs.ClientKey)
	if code != 1 || !strings.Contains(out, "not signed by a trusted CA") {
		t.Fatalf("untrusted server certificate: code %d\n%s", code, out)
	}
	code, out = run("lua", "load", "--valkey-url", "rediss://"+addr, "--valkey-tls-ca", certs.CA, "--valkey-tls-cert", certs.ClientCert)
	if code != 1 || !strings.Contains(out, "both its certificate and its key") {
		t.Fatalf("certificate without key: code %d\n%s", code, out)
	}
}

// TestRunWaitsForBackend starts `fabric run` before its server: it says
// it is waiting, retries, and runs once the server is up. With nothing
// there it gives up after --backend-wait with a clear error; a server
// that refuses its password fails at once.
func TestRunWaitsForBackend(t *testing.T) {
	t.Parallel()
	port := valkeytest.FreePort(t)
	url := "redis://127.0.0.1:" + strconv.Itoa(port)
	out, errb, wait := startRun(t, "run", "--valkey-url", url, "--backend-wait", "60s", "--plugins", "",
		"--duration", "1s", "--rate", "20", "--mix", "immediate=1", "--admin-addr", "127.0.0.1:0", "--view", "off",
		"--partitions", "flow=8,budget=2,quota=2")
	waitingRE := regexp.MustCompile(`meanwhile http://(\S+)/readyz answers 503`)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := waitingRE.FindStringSubmatch(errb.String()); m != nil && strings.Contains(errb.String(), "waiting for backend "+url) {
			addr = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run did not say it waits for the backend\nstdout:\n%s\nstderr:\n%s", out, errb)
		}
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		code, body := httpGet(t, "http://"+addr+path)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for backend "+url) || !strings.Contains(body, "connection refused") {
			t.Fatalf("%s while waiting: %d %s", path, code, body)
		}
	}
	if _, body := httpGet(t, "http://"+addr+"/status"); !strings.Contains(body, `"error":"waiting for backend `+url) {
		t.Fatalf("/status while waiting: %s", body)
	}
	if strings.Contains(out.String(), "fabric "+Version+" on") {
		t.Fatalf("run started before its backend:\n%s", out)
	}
	up := time.Now()
	valkeytest.NewServerOnPort(t, port)
	if code := wait(); code != 0 {
		t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	if !strings.Contains(errb.String(), "backend "+url+" reachable after") || !strings.Contains(out.String(), "executions by state: completed=") {
		t.Fatalf("run did not go on once the backend was up (%s after it)\nstdout:\n%s\nstderr:\n%s", time.Since(up), out, errb)
	}
	if !strings.Contains(out.String(), "admin: http://"+addr+"/metrics") {
		t.Errorf("the admin server did not take over %s, the address that answered while waiting:\n%s", addr, out)
	}

	dead := "redis://127.0.0.1:" + strconv.Itoa(valkeytest.FreePort(t))
	start := time.Now()
	code, o, e := runCmd(t, "run", "--valkey-url", dead, "--backend-wait", "1s", "--plugins", "", "--admin-addr", "", "--view", "off")
	took := time.Since(start)
	if code != 1 || !strings.Contains(e, "not reachable within 1s (--backend-wait)") || !strings.Contains(e, "connection refused") {
		t.Fatalf("dead backend: code %d\n%s%s", code, o, e)
	}
	if took < time.Second || took > 10*time.Second {
		t.Errorf("dead backend: gave up after %s, want about --backend-wait 1s", took)
	}

	srv := valkeytest.NewTCPServer(t, "--requirepass", "pw-"+randomHex(4))
	start = time.Now()
	code, o, e = runCmd(t, "run", "--valkey-url", "redis://"+srv.TCPAddr(), "--backend-wait", "60s", "--plugins", "", "--admin-addr", "", "--view", "off")
	if code != 1 || !strings.Contains(e, "requires authentication") || strings.Contains(e, "waiting for backend") || time.Since(start) > 10*time.Second {
		t.Fatalf("refused password: code %d after %s\n%s%s", code, time.Since(start), o, e)
	}
}

// TestRunOnTLSCluster runs `fabric run` with the demo workload on a
// 3-primary cluster that speaks only TLS (clients and cluster bus) and
// requires a password, given in the environment: it bootstraps every
// primary over TLS and finishes every execution.
func TestRunOnTLSCluster(t *testing.T) {
	t.Parallel()
	certs := valkeytest.NewCerts(t)
	pw := "cl-" + randomHex(6)
	addrs := valkeytest.NewTLSCluster(t, certs, pw)
	url := "rediss+cluster://" + strings.Join(addrs, ",")
	var o, e syncBuffer
	env := func(k string) string { return map[string]string{envValkeyPassword: pw}[k] }
	code := runCLI(context.Background(), &cliEnv{stdout: &o, stderr: &e, getenv: env}, []string{"run", "--valkey-url", url,
		"--valkey-tls-ca", certs.CA, "--plugins", "", "--admin-addr", "", "--view", "lines", "--refresh", "500ms",
		"--duration", "2s", "--drain-timeout", "60s", "--rate", "40", "--mix", "immediate=2,delayed=1,retry=1",
		"--partitions", "flow=8,budget=2,quota=2"})
	out := o.String()
	if code != 0 {
		t.Fatalf("fabric run on the TLS cluster: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, e.String())
	}
	if !regexp.MustCompile(`executions by state: completed=[1-9]\d*\n`).MatchString(out) || !strings.Contains(out, "; unfinished 0;") {
		t.Fatalf("the demo did not finish its work on the TLS cluster:\n%s\nstderr:\n%s", out, e.String())
	}
	if strings.Contains(out+e.String(), pw) {
		t.Fatalf("the password was shown:\n%s%s", out, e.String())
	}
}

// TestAdminOverTLS runs `fabric run` with an HTTPS admin server:
// `fabric status --admin https://... --admin-ca` reads it, a client that
// does not trust its CA gets a clear error, and plain HTTP gets no
// status.
func TestAdminOverTLS(t *testing.T) {
	t.Parallel()
	certs := valkeytest.NewCerts(t)
	out, errb, wait := startRun(t, "run", "--plugins", "", "--duration", "2s", "--rate", "20", "--mix", "immediate=1",
		"--admin-addr", "127.0.0.1:0", "--admin-tls-cert", certs.ServerCert, "--admin-tls-key", certs.ServerKey,
		"--view", "off", "--census-interval", "200ms", "--partitions", "flow=8,budget=2,quota=2")
	re := regexp.MustCompile(`admin: https://(\S+)/metrics`)
	var addr string
	for deadline := time.Now().Add(60 * time.Second); addr == ""; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no https admin address within 60s\nstdout:\n%s\nstderr:\n%s", out, errb)
		}
	}
	code, o, e := runCmd(t, "status", "--admin", "https://"+addr, "--admin-ca", certs.CA, "--json")
	var rep struct{ Backend string }
	if code != 0 || json.Unmarshal([]byte(o), &rep) != nil || !strings.Contains(rep.Backend, "private") {
		t.Fatalf("status over https: code %d\n%s%s", code, o, e)
	}
	code, o, e = runCmd(t, "status", "--admin", "https://"+addr)
	if code != 1 || !strings.Contains(e, "certificate signed by unknown authority") {
		t.Fatalf("status without the admin CA: code %d\n%s%s", code, o, e)
	}
	if status, body := httpGet(t, "http://"+addr+"/status"); status == http.StatusOK {
		t.Fatalf("plain HTTP got the status: %s", body)
	}
	if code := wait(); code != 0 {
		t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
}
