package admin

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIError is the body of every /api error answer.
type APIError struct {
	// Error says what went wrong, for a person.
	Error string `json:"error"`
	// Status repeats the HTTP status code.
	Status int `json:"status"`
}

// ConsoleBackend is what the console API reads and acts on: *Console for
// Valkey, *PGConsole for Postgres.
type ConsoleBackend interface {
	ListExecutions(ctx context.Context, q ListQuery) (*ExecutionPage, error)
	Execution(ctx context.Context, id string) (*ExecutionDetail, error)
	Flow(ctx context.Context, id string) (*FlowView, error)
	Lanes(ctx context.Context) ([]LaneCounts, error)
	Workers(ctx context.Context, ns string) ([]WorkerInfo, error)
	Cancel(ctx context.Context, id, reason string) (*ActionResult, error)
	Replay(ctx context.Context, id string) (*ActionResult, error)
	Priority(ctx context.Context, id string, priority int) (*ActionResult, error)
	Signal(ctx context.Context, id string, s SignalRequest) (*ActionResult, error)
	SetLaneState(ctx context.Context, lane, state string) error
}

// ConsoleConfig configures NewConsoleHandler.
type ConsoleConfig struct {
	// Backend answers the API. Required.
	Backend ConsoleBackend
	// AdminToken authorizes writes ("" refuses them all).
	AdminToken string
	// Logger receives the actions taken (default slog.Default()).
	Logger *slog.Logger
}

// consoleAPI serves the console's JSON API and web UI.
type consoleAPI struct {
	cfg ConsoleConfig
}

// NewConsoleHandler returns the operator console: the JSON API under
// /api/ and the web UI under /ui/ (/ redirects there). The admin Server
// mounts it; a host without one (the Postgres backend) serves it alone.
func NewConsoleHandler(cfg ConsoleConfig) http.Handler {
	if cfg.Backend == nil {
		panic("admin: ConsoleConfig.Backend is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &consoleAPI{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/executions", s.apiList)
	mux.HandleFunc("GET /api/executions/{id}", s.apiExecution)
	mux.HandleFunc("POST /api/executions/{id}/{action}", s.apiAction)
	mux.HandleFunc("GET /api/flows/{id}", s.apiFlow)
	mux.HandleFunc("GET /api/lanes", s.apiLanes)
	mux.HandleFunc("POST /api/lanes/{lane}/{action}", s.apiLaneAction)
	mux.HandleFunc("GET /api/workers", s.apiWorkers)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		apiFail(w, fmt.Errorf("%w: no API route %s %s", ErrNotFound, r.Method, r.URL.Path))
	})
	routeUI(mux)
	return mux
}

// routeConsole mounts the console on the admin server.
func (s *Server) routeConsole() {
	h := NewConsoleHandler(ConsoleConfig{Backend: s.cfg.Console, AdminToken: s.cfg.AdminToken, Logger: s.cfg.Logger})
	s.mux.Handle("/api/", h)
	s.mux.HandleFunc("GET /api/plugins/{name}", PluginDetailHandler(s.cfg.Host))
	if s.cfg.Sampler != nil {
		s.mux.HandleFunc("GET /api/throughput", throughputHandler(s.cfg.Sampler))
	}
	s.mux.Handle("/ui/", h)
	s.mux.Handle("GET /{$}", h)
}

// apiFail answers err with its status: ErrBadRequest 400, ErrNotFound
// 404, ErrConflict 409, a body over its cap 413, ErrUnsupported 501,
// anything else 500.
func apiFail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, errTooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrUnsupported):
		code = http.StatusNotImplemented
	}
	writeJSON(w, code, APIError{Error: err.Error(), Status: code})
}

func (s *consoleAPI) apiList(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := ListQuery{Lane: v.Get("lane"), State: v.Get("state"), Flow: v.Get("flow"), Cursor: v.Get("cursor")}
	switch v.Get("order") {
	case "", "asc":
	case "desc":
		q.Desc = true
	default:
		apiFail(w, fmt.Errorf("%w: order %q: want asc or desc", ErrBadRequest, v.Get("order")))
		return
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			apiFail(w, fmt.Errorf("%w: limit %q is not a number in 1..1000", ErrBadRequest, l))
			return
		}
		q.Limit = n
	}
	page, err := s.cfg.Backend.ListExecutions(r.Context(), q)
	if err != nil {
		apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *consoleAPI) apiExecution(w http.ResponseWriter, r *http.Request) {
	d, err := s.cfg.Backend.Execution(r.Context(), r.PathValue("id"))
	if err != nil {
		apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *consoleAPI) apiFlow(w http.ResponseWriter, r *http.Request) {
	f, err := s.cfg.Backend.Flow(r.Context(), r.PathValue("id"))
	if err != nil {
		apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

func (s *consoleAPI) apiLanes(w http.ResponseWriter, r *http.Request) {
	l, err := s.cfg.Backend.Lanes(r.Context())
	if err != nil {
		apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lanes": l})
}

func (s *consoleAPI) apiWorkers(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	ws, err := s.cfg.Backend.Workers(r.Context(), ns)
	if err != nil {
		apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": ns, "workers": ws})
}

// authorized checks the request's bearer token against the configured
// admin token in constant time; it answers 403 itself when refused.
func (s *consoleAPI) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.AdminToken == "" {
		writeJSON(w, http.StatusForbidden, APIError{Status: http.StatusForbidden,
			Error: "writes are disabled: this host has no admin token (start it with --admin-token-file, admin_token_file in fabric.toml or FABRIC_ADMIN_TOKEN)"})
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.cfg.AdminToken)) != 1 {
		msg := "admin token required: send it as Authorization: Bearer <token>"
		if ok {
			msg = "admin token refused: it does not match this host's"
		}
		writeJSON(w, http.StatusForbidden, APIError{Status: http.StatusForbidden, Error: msg})
		return false
	}
	return true
}

// actionBody is the JSON body of POST /api/executions/{id}/{action}.
type actionBody struct {
	Reason   string `json:"reason"`
	Priority *int   `json:"priority"`
	SignalRequest
}

func (s *consoleAPI) apiAction(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	var b actionBody
	if err := decodeJSON(w, r, &b); err != nil {
		apiFail(w, err)
		return
	}
	id, action := r.PathValue("id"), r.PathValue("action")
	var res *ActionResult
	var err error
	switch action {
	case "cancel":
		res, err = s.cfg.Backend.Cancel(r.Context(), id, b.Reason)
	case "replay", "retry":
		res, err = s.cfg.Backend.Replay(r.Context(), id)
	case "priority":
		if b.Priority == nil {
			err = fmt.Errorf("%w: body needs {\"priority\": 0..9000}", ErrBadRequest)
			break
		}
		res, err = s.cfg.Backend.Priority(r.Context(), id, *b.Priority)
	case "signal":
		res, err = s.cfg.Backend.Signal(r.Context(), id, b.SignalRequest)
	default:
		err = fmt.Errorf("%w: unknown action %q (cancel, replay, priority, signal)", ErrNotFound, action)
	}
	if err != nil {
		apiFail(w, err)
		return
	}
	s.cfg.Logger.Info("admin action", "action", action, "execution", id, "remote", r.RemoteAddr, "at", time.Now().UTC())
	writeJSON(w, http.StatusOK, res)
}

func (s *consoleAPI) apiLaneAction(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	action := r.PathValue("action")
	var state string
	switch action {
	case "pause":
		state = "paused"
	case "resume":
		state = "active"
	default:
		apiFail(w, fmt.Errorf("%w: unknown lane action %q (pause, resume)", ErrNotFound, action))
		return
	}
	apiFail(w, s.cfg.Backend.SetLaneState(r.Context(), r.PathValue("lane"), state))
}
