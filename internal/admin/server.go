package admin

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/internal/startstop"
)

// ServerConfig configures a Server. Zero fields take the defaults of
// defaults.go.
type ServerConfig struct {
	// Addr is the listen address (default 127.0.0.1:9480; port 0 picks a
	// free one, see Server.Addr).
	Addr string
	// Hosts are the names a request's Host header may carry besides the
	// loopback ones (and, on a bind that is not loopback, IP addresses):
	// the names the server is reached by. Others are refused with 421,
	// so that a DNS-rebinding page cannot read the console.
	Hosts []string
	// IdleTimeout closes a keep-alive connection idle this long (default
	// ServerIdleTimeoutDefault).
	IdleTimeout time.Duration
	// TLS, when set, serves HTTPS with this config (its certificate
	// included) instead of plain HTTP.
	TLS *tls.Config
	// Host is the plugin source (nil: a deployment without a host).
	Host PluginSource
	// Backend is a Valkey deployment: it is probed by /healthz and
	// /readyz and served by the console unless Probe and Console are set.
	// One of Backend and Probe is required.
	Backend *valkey.Client
	// Probe answers /healthz and /readyz (default ValkeyProbe(Backend));
	// PGProbe for a Postgres deployment.
	Probe Prober
	// Console serves the console API and UI (default NewConsole over
	// valkey.NewDriver(Backend)); NewConsole(postgres.NewDriver(c)) for a
	// Postgres deployment.
	Console ConsoleBackend
	// BackendName describes the backend in /status.
	BackendName string
	// Sampler feeds /status and the census gauges (nil: none).
	Sampler *Sampler
	// Metrics is served on /metrics (nil: a fresh NewMetrics).
	Metrics *Metrics
	// ProbeTimeout bounds the backend round trip of /healthz and /readyz
	// (default 1 s).
	ProbeTimeout time.Duration
	// Logger receives server errors (default slog.Default()).
	Logger *slog.Logger
	// AdminToken authorizes the console's write actions (Authorization:
	// Bearer); "" refuses every write. See console_api.go.
	AdminToken string
}

// Server is the admin HTTP server.
//
// # Notes
//
//   - Start listens before it returns (a bind error is returned), then
//     serves in the background. Stop shuts down gracefully within 5 s.
//   - Safe for concurrent use.
type Server struct {
	startstop.Base
	cfg ServerConfig
	mux *http.ServeMux

	addr net.Addr
}

// Prober answers the admin server's probes against its backend.
type Prober interface {
	// Ping is one round trip to the backend (/healthz).
	Ping(ctx context.Context) error
	// Ready reports whether the backend can serve the host (/readyz):
	// Valkey's FlowFabric library loaded, Postgres's schema migrated.
	Ready(ctx context.Context) error
}

// ValkeyProbe is the Prober of a Valkey deployment: PING, then the
// FlowFabric library's version.
func ValkeyProbe(c *valkey.Client) Prober { return valkeyProbe{c} }

type valkeyProbe struct{ c *valkey.Client }

func (p valkeyProbe) Ping(ctx context.Context) error {
	raw := p.c.Raw()
	return raw.Do(ctx, raw.B().Ping().Build()).Error()
}

func (p valkeyProbe) Ready(ctx context.Context) error {
	if _, err := p.c.LibraryVersion(ctx); err != nil {
		return fmt.Errorf("flowfabric library: %w", err)
	}
	return nil
}

// NewServer validates cfg and fills its defaults; neither a Backend nor a
// Probe and Console is a wiring mistake and panics.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Backend != nil {
		if cfg.Probe == nil {
			cfg.Probe = ValkeyProbe(cfg.Backend)
		}
		if cfg.Console == nil {
			cfg.Console = NewConsole(valkey.NewDriver(cfg.Backend))
		}
	}
	if cfg.Probe == nil || cfg.Console == nil {
		panic("admin: ServerConfig.Backend, or Probe and Console, are required")
	}
	cfg.Addr = cmp.Or(cfg.Addr, ServerAddrDefault)
	cfg.ProbeTimeout = cmp.Or(cfg.ProbeTimeout, ServerProbeTimeoutDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	cfg.Metrics.Attach(cfg.Host, cfg.Sampler)
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Metrics.Registry(), promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /plugins", s.plugins)
	s.mux.HandleFunc("GET /status", s.status)
	s.routeConsole()
	s.routeShadow()
	return s
}

// Handler returns the server's routes (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.mux }

// Addr returns the address listened on (nil before Start).
func (s *Server) Addr() net.Addr { return s.addr }

// URL returns http://addr or, with TLS, https://addr ("" before Start).
func (s *Server) URL() string {
	if s.addr == nil {
		return ""
	}
	if s.cfg.TLS != nil {
		return "https://" + s.addr.String()
	}
	return "http://" + s.addr.String()
}

// Start listens on cfg.Addr and serves until Stop or ctx ends.
func (s *Server) Start(ctx context.Context) error {
	ctx, ok, started, stopped := s.StartInit(ctx)
	if !ok {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		stopped()
		return fmt.Errorf("admin: listen %s: %w", s.cfg.Addr, err)
	}
	s.addr = ln.Addr()
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	srv := NewHTTPServer(ln, s.mux, HTTPOptions{Hosts: s.cfg.Hosts, IdleTimeout: s.cfg.IdleTimeout,
		// Failed TLS handshakes and the like go to the logger at debug,
		// not to the standard logger on stderr.
		ErrorLog: slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug)})
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("admin server stopped", "addr", s.addr.String(), "error", err)
		}
	}()
	go func() {
		defer stopped()
		started()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}()
	return nil
}

// probe is one health or readiness answer.
type probe struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

func (s *Server) answer(w http.ResponseWriter, err error) {
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, probe{Status: "unavailable", Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, probe{Status: "ok"})
}

func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.ProbeTimeout, fmt.Errorf("admin.probe.ping: no answer within %s", s.cfg.ProbeTimeout))
	defer cancel()
	if err := s.cfg.Probe.Ping(ctx); err != nil {
		if c := context.Cause(ctx); c != nil {
			err = c
		}
		return fmt.Errorf("backend: %w", err)
	}
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.answer(w, s.ping(r.Context()))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Host != nil {
		select {
		case <-s.cfg.Host.Started():
		default:
			s.answer(w, errors.New("host: initial plugin load not finished"))
			return
		}
	}
	if err := s.ping(r.Context()); err != nil {
		s.answer(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ProbeTimeout)
	defer cancel()
	if err := s.cfg.Probe.Ready(ctx); err != nil {
		s.answer(w, err)
		return
	}
	s.answer(w, nil)
}

func (s *Server) plugins(w http.ResponseWriter, _ *http.Request) {
	r := BuildReport(time.Now(), "", s.cfg.Host, nil)
	writeJSON(w, http.StatusOK, r.Plugins)
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, BuildReport(time.Now(), s.cfg.BackendName, s.cfg.Host, s.cfg.Sampler))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
