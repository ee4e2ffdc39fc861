package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/admin"
)

// TestServerClosesIdleConnections: a keep-alive connection left idle is
// closed by the server after its IdleTimeout, not held for ever.
func TestServerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	base := startServer(t, admin.ServerConfig{Backend: valkeytest.Client(t), IdleTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("keep-alive request: %d close=%v", resp.StatusCode, resp.Close)
	}
	// The server closes its end: the read ends with EOF well before the
	// generous deadline, which only keeps a broken test from hanging.
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read %v, want EOF (closed by the server)", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("idle connection closed after %s, want about 300ms", d)
	}
}

// hostGet GETs path from base with the Host header host.
func hostGet(t *testing.T, base, path, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServerRefusesForeignHost: a loopback admin server answers to the
// loopback names and its configured ones, with or without a port, and
// refuses any other Host (a DNS-rebinding page's) with 421, before any
// handler reads the backend.
func TestServerRefusesForeignHost(t *testing.T) {
	t.Parallel()
	base := startServer(t, admin.ServerConfig{Backend: valkeytest.Client(t), Hosts: []string{"Fabric.Internal"}})
	port := base[strings.LastIndex(base, ":")+1:]
	for _, h := range []string{"localhost", "localhost:" + port, "LOCALHOST:1", "127.0.0.1", "127.0.0.1:" + port, "[::1]", "[::1]:" + port,
		"fabric.internal", "fabric.internal:" + port} {
		if code, body := hostGet(t, base, "/api/lanes", h); code != 200 {
			t.Errorf("Host %s: %d %s, want 200", h, code, body)
		}
	}
	for _, h := range []string{"rebind.attacker.example", "rebind.attacker.example:" + port, "localhost.attacker.example",
		"10.0.0.7", "fabric.internal.evil", "127.0.0.1.nip.io"} {
		for _, path := range []string{"/api/executions", "/status", "/healthz", "/ui/"} {
			code, body := hostGet(t, base, path, h)
			var e admin.APIError
			if code != http.StatusMisdirectedRequest || json.Unmarshal([]byte(body), &e) != nil ||
				!strings.Contains(e.Error, "is not served here") || !strings.Contains(e.Error, "--admin-hosts") {
				t.Errorf("Host %s %s: %d %s, want 421 naming --admin-hosts", h, path, code, body)
			}
		}
	}
}

// rawPost POSTs body as it is, with the admin token.
func rawPost(t *testing.T, u, body string) (int, admin.APIError) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "POST", u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	var e admin.APIError
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("POST %s: answer %q is not JSON: %v", u, b, err)
	}
	return resp.StatusCode, e
}

// TestActionBodyStrict: an action's body is one JSON object of known
// fields, at most 1 MiB; anything else is refused with a clear error
// and changes nothing.
func TestActionBodyStrict(t *testing.T) {
	base, s := consoleServer(t, testToken)
	u := base + "/api/executions/" + string(s.Eligible) + "/priority"
	for _, c := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"trailing garbage", `{"priority": 4242} rm -rf`, 400, "data after its JSON value"},
		{"second object", `{"priority": 4242}{"priority": 1}`, 400, "data after its JSON value"},
		{"unknown field", `{"priority": 4242, "owner": "mallory"}`, 400, `unknown field "owner"`},
		{"not an object", `[4242]`, 400, "cannot unmarshal array"},
		{"oversize", `{"priority": 4242, "reason": "` + strings.Repeat("A", 2<<20) + `"}`, 413, "over 1048576 bytes"},
	} {
		code, e := rawPost(t, u, c.body)
		if code != c.code || e.Status != c.code || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: %d %+v, want %d containing %q", c.name, code, e, c.code, c.want)
		}
	}
	var d admin.ExecutionDetail
	if call(t, "GET", base+"/api/executions/"+string(s.Eligible), "", nil, &d); d.Core["priority"] == "4242" {
		t.Fatalf("a refused body changed the priority: %v", d.Core)
	}
	// A clean body still works, with trailing whitespace.
	if code, e := rawPost(t, u, "{\"priority\": 4242}\n\t "); code != 200 {
		t.Fatalf("clean body: %d %+v", code, e)
	}
}

// TestServerCapsHeaders: headers over 64 KiB are refused with 431.
func TestServerCapsHeaders(t *testing.T) {
	t.Parallel()
	base := startServer(t, admin.ServerConfig{Backend: valkeytest.Client(t)})
	req, err := http.NewRequest("GET", base+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Filler", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KiB header: %s, want 431", resp.Status)
	}
	if code, body := hostGet(t, base, "/healthz", "localhost"); code != 200 {
		t.Fatalf("a normal request after it: %d %s", code, body)
	}
}
