package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// TestRunPostgresVerifyFull runs `fabric run` on a Postgres cluster with
// ssl=on whose TCP rules accept only TLS with a SCRAM password and a
// client certificate, with sslmode=verify-full against the test CA, the
// client certificate in the URL and the password from a file (from
// fabric.toml); then `fabric migrate` with the password from the
// environment. An untrusted CA, a missing client certificate, a wrong
// password and a plaintext connection are clear errors, and the password
// is shown nowhere.
func TestRunPostgresVerifyFull(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Postgres cluster")
	}
	certs := valkeytest.NewCerts(t)
	port := valkeytest.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := postgres.StartServer(ctx, postgres.ServerConfig{Port: port, TLSCertFile: certs.ServerCert, TLSKeyFile: certs.ServerKey,
		TLSCAFile: certs.CA, HBA: []string{"hostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-ca"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	pw := "pg-" + randomHex(8)
	admin, err := pgx.Connect(ctx, srv.SocketURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER ROLE postgres PASSWORD '%s'", pw)); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)

	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pg.pw")
	base := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)
	verified := base + "?sslmode=verify-full&sslrootcert=" + url.QueryEscape(certs.CA) +
		"&sslcert=" + url.QueryEscape(certs.ClientCert) + "&sslkey=" + url.QueryEscape(certs.ClientKey)
	toml := fmt.Sprintf("postgres_url = %q\npostgres_password_file = %q\n", verified, pwFile)
	for path, content := range map[string]string{pwFile: pw + "\n", filepath.Join(dir, "fabric.toml"): toml} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var shown strings.Builder
	run := func(getenv func(string) string, args ...string) (int, string) {
		var o, e syncBuffer
		code := runCLI(context.Background(), &cliEnv{stdout: &o, stderr: &e, getenv: getenv}, args)
		shown.WriteString(o.String() + e.String())
		return code, o.String() + e.String()
	}
	noEnv := func(string) string { return "" }
	code, out := run(noEnv, "run", "--config", filepath.Join(dir, "fabric.toml"), "--migrate", "--plugins", "", "--duration", "1s",
		"--rate", "20", "--mix", "immediate=1")
	if code != 0 || !regexp.MustCompile(`demo: [1-9]\d* executions \(immediate=[1-9]\d*\) in \S+; terminal: completed=[1-9]`).MatchString(out) {
		t.Fatalf("run over verify-full: code %d\n%s", code, out)
	}
	pgEnv := func(k string) string { return map[string]string{envPostgresPassword: pw}[k] }
	if code, out := run(pgEnv, "migrate", "--postgres-url", verified); code != 0 {
		t.Fatalf("migrate with $%s: code %d\n%s", envPostgresPassword, code, out)
	}
	other := valkeytest.NewCerts(t)
	for _, c := range []struct {
		url, want string
		env       func(string) string
	}{
		{strings.Replace(verified, url.QueryEscape(certs.CA), url.QueryEscape(other.CA), 1), "certificate signed by unknown authority", pgEnv},
		{base + "?sslmode=verify-full&sslrootcert=" + url.QueryEscape(certs.CA), "requires a valid client certificate", pgEnv},
		{verified, "password authentication failed", func(k string) string { return map[string]string{envPostgresPassword: "not-" + pw}[k] }},
		{base + "?sslmode=disable", "no encryption", pgEnv},
	} {
		code, out := run(c.env, "migrate", "--postgres-url", c.url)
		t.Logf("%s: %s", c.want, lastLine(out))
		if code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("migrate %s: code %d, want an error with %q:\n%s", c.url, code, c.want, out)
		}
	}
	if strings.Contains(shown.String(), pw) {
		t.Errorf("the password was shown:\n%s", shown.String())
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestRunPostgresWaitsForBackend: `fabric run` on a Postgres URL where
// nothing listens yet says it waits, and its admin address answers
// meanwhile as on Valkey (/readyz and /healthz 503 with the reason,
// /status naming it); once the database is there the run goes on, its
// admin server on the address that answered. (The database is a migrated
// one of the shared cluster, reached through a socket directory where its
// socket appears only once the run waits.) Where nothing ever listens it
// fails after --backend-wait, naming the limit.
func TestRunPostgresWaitsForBackend(t *testing.T) {
	t.Parallel()
	db, err := url.Parse(pgtest.NewDatabase(t, true))
	if err != nil {
		t.Fatal(err)
	}
	q := db.Query()
	sockDir, port := t.TempDir(), q.Get("port")
	socket := filepath.Join(q.Get("host"), ".s.PGSQL."+port)
	q.Set("host", sockDir)
	db.RawQuery = q.Encode()
	pgURL := db.String()
	out, errb, wait := startRun(t, "run", "--postgres-url", pgURL, "--backend-wait", "2m", "--plugins", "",
		"--duration", "1s", "--rate", "20", "--mix", "immediate=1", "--admin-addr", "127.0.0.1:0", "--view", "off")
	waitingRE := regexp.MustCompile(`meanwhile http://(\S+)/readyz answers 503`)
	var addr string
	valkeytest.Eventually(t, 30*time.Second, "the run says it waits and where /readyz answers", func() bool {
		m := waitingRE.FindStringSubmatch(errb.String())
		if m != nil && strings.Contains(errb.String(), "fabric: waiting for backend database ") {
			addr = m[1]
			return true
		}
		return false
	})
	for _, path := range []string{"/readyz", "/healthz"} {
		code, body := httpGet(t, "http://"+addr+path)
		if code != 503 || !strings.Contains(body, "waiting for backend database ") || !strings.Contains(body, "no such file") {
			t.Fatalf("%s while waiting: %d %s", path, code, body)
		}
	}
	if _, body := httpGet(t, "http://"+addr+"/status"); !strings.Contains(body, `"error":"waiting for backend database `) {
		t.Fatalf("/status while waiting: %s", body)
	}
	if strings.Contains(out.String(), "fabric "+Version+" on") {
		t.Fatalf("run started before its backend:\n%s", out)
	}
	if err := os.Symlink(socket, filepath.Join(sockDir, ".s.PGSQL."+port)); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != 0 {
		t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	if o := out.String(); !regexp.MustCompile(`backend database \S+ reachable after`).MatchString(errb.String()) ||
		!strings.Contains(o, "executions by state: completed=") || !strings.Contains(o, "admin: http://"+addr+"/metrics") {
		t.Fatalf("run did not go on once the backend was up, its admin server on %s\nstdout:\n%s\nstderr:\n%s", addr, o, errb)
	}

	dead := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", valkeytest.FreePort(t))
	start := time.Now()
	code, o, e := runCmd(t, "run", "--postgres-url", dead, "--backend-wait", "1500ms", "--plugins", "", "--duration", "1s", "--admin-addr", "")
	took := time.Since(start)
	if code != 1 || !strings.Contains(e, "fabric: waiting for backend database "+dead) ||
		!strings.Contains(e, "not reachable within 1.5s (--backend-wait)") {
		t.Fatalf("code %d\nstdout:\n%s\nstderr:\n%s", code, o, e)
	}
	if took < 1500*time.Millisecond || took > 15*time.Second {
		t.Errorf("gave up after %s, want about --backend-wait 1.5s", took)
	}
}
