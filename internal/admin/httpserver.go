package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Limits of every fabric HTTP server (the admin server, and the one that
// answers on its address while `fabric run` waits for its backend).
const (
	// serverReadHeaderTimeout bounds reading a request's headers.
	serverReadHeaderTimeout = 5 * time.Second
	// serverReadTimeout bounds reading a whole request, the largest a
	// plugin upload (maxShadowUpload).
	serverReadTimeout = 2 * time.Minute
	// serverWriteTimeout bounds a handler and its answer. Nothing the
	// server answers streams (no long poll, no server-sent events); the
	// slowest answer is a console page read from the backend.
	serverWriteTimeout = 2 * time.Minute
	// serverMaxHeaderBytes caps a request's headers.
	serverMaxHeaderBytes = 64 << 10
	// maxJSONBody caps a JSON request body.
	maxJSONBody = 1 << 20
)

// errTooLarge marks a request body over its cap (answered 413).
var errTooLarge = errors.New("request body too large")

// HTTPOptions are what NewHTTPServer needs besides the handler.
type HTTPOptions struct {
	// Hosts are the names besides the loopback ones (localhost,
	// 127.0.0.1, ::1) that a request's Host header may carry.
	Hosts []string
	// IdleTimeout closes a keep-alive connection idle this long (default
	// ServerIdleTimeoutDefault).
	IdleTimeout time.Duration
	// ErrorLog receives the server's own errors (nil: discarded).
	ErrorLog *log.Logger
}

// NewHTTPServer returns the http.Server of a fabric HTTP listener ln:
// header, read, write and idle timeouts, a header size cap, and h behind
// the Host check of hostGuard.
func NewHTTPServer(ln net.Listener, h http.Handler, o HTTPOptions) *http.Server {
	if o.ErrorLog == nil {
		o.ErrorLog = log.New(io.Discard, "", 0)
	}
	idle := o.IdleTimeout
	if idle <= 0 {
		idle = ServerIdleTimeoutDefault
	}
	return &http.Server{Handler: hostGuard(ln.Addr(), o.Hosts, h), ReadHeaderTimeout: serverReadHeaderTimeout,
		ReadTimeout: serverReadTimeout, WriteTimeout: serverWriteTimeout, IdleTimeout: idle,
		MaxHeaderBytes: serverMaxHeaderBytes, ErrorLog: o.ErrorLog}
}

// hostGuard serves a request only when its Host header names this
// server, refusing the rest with 421 Misdirected Request: a page of
// another site whose name an attacker pointed at this address (DNS
// rebinding) must not read the console through the operator's browser.
// Served are the loopback names (localhost, 127.0.0.1, [::1]) and hosts,
// with or without a port; on a bind that is not loopback also any IP
// address (a rebinding page is only ever reached by a name).
func hostGuard(bound net.Addr, hosts []string, h http.Handler) http.Handler {
	allowed := []string{"localhost", "127.0.0.1", "::1"}
	for _, n := range hosts {
		allowed = append(allowed, hostOnly(n))
	}
	loopback := true
	if ta, ok := bound.(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		loopback = false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := hostOnly(r.Host)
		ok := slices.Contains(allowed, name)
		if !ok && !loopback {
			ok = net.ParseIP(name) != nil
		}
		if !ok {
			code := http.StatusMisdirectedRequest
			writeJSON(w, code, APIError{Status: code, Error: fmt.Sprintf(
				"host %q is not served here: this server answers to %s; add the name with fabric run --admin-hosts (admin_hosts in fabric.toml)",
				r.Host, strings.Join(allowed, ", "))})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hostOnly is the lower-cased name of a host[:port] ("[::1]:80" → "::1").
func hostOnly(hostport string) string {
	h := hostport
	if name, _, err := net.SplitHostPort(hostport); err == nil {
		h = name
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

// readBody reads a request body of at most limit bytes; a longer one is
// errTooLarge (413), one that fails to arrive ErrBadRequest.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, fmt.Errorf("%w: over %d bytes", errTooLarge, limit)
	case err != nil:
		return nil, fmt.Errorf("%w: body: %v", ErrBadRequest, err)
	}
	return b, nil
}

// decodeJSON reads r's body, at most maxJSONBody bytes, into dst
// strictly: one JSON value of dst's fields, nothing after it. An empty
// body leaves dst as it is. Every JSON request body is read here.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	b, err := readBody(w, r, maxJSONBody)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("%w: body: %v", ErrBadRequest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: body: data after its JSON value (send one JSON object)", ErrBadRequest)
	}
	return nil
}
