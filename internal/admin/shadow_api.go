package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fabric-host/fabric/host"
)

// ShadowSource is what the safe-change routes act on; *host.Host
// implements it.
type ShadowSource interface {
	LoadShadowBytes(ctx context.Context, wasm []byte) (string, error)
	Unshadow(ctx context.Context, name string) error
	ShadowDiff(name string) (host.ShadowStatus, error)
	Promote(ctx context.Context, name string) (string, error)
	Rollback(ctx context.Context, name string) (string, error)
}

// ShadowAnswer is the answer of the safe-change writes: the plugin, the
// version now live, and its shadow (nil: none).
type ShadowAnswer struct {
	Plugin string             `json:"plugin"`
	Live   string             `json:"live"`
	Shadow *host.ShadowStatus `json:"shadow,omitempty"`
}

// maxShadowUpload bounds an uploaded candidate (the host's own file limit
// applies after).
const maxShadowUpload = 128 << 20

// routeShadow serves the safe-change API (writes need the admin token):
//
//	POST   /api/plugins/shadow          body: a .wasm; loads it as the candidate of its plugin
//	GET    /api/plugins/{name}/shadow   the candidate's comparison (host.ShadowStatus)
//	DELETE /api/plugins/{name}/shadow   drops the candidate
//	POST   /api/plugins/{name}/promote  makes the candidate live, keeping the old version
//	POST   /api/plugins/{name}/rollback makes the kept version live again
func (s *Server) routeShadow() {
	auth := &consoleAPI{cfg: ConsoleConfig{AdminToken: s.cfg.AdminToken, Logger: s.cfg.Logger}}
	src := func(w http.ResponseWriter) ShadowSource {
		ss, ok := s.cfg.Host.(ShadowSource)
		if s.cfg.Host == nil || !ok {
			apiFail(w, fmt.Errorf("%w: this deployment runs no host", ErrNotFound))
			return nil
		}
		return ss
	}
	answer := func(w http.ResponseWriter, ss ShadowSource, name string) {
		a := ShadowAnswer{Plugin: name}
		if st, ok := s.cfg.Host.(PluginDetailSource); ok {
			p, _ := st.Plugin(name)
			a.Live = p.Version
			a.Shadow = p.Shadow
		}
		writeJSON(w, http.StatusOK, a)
	}
	write := func(f func(r *http.Request, ss ShadowSource) (string, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !auth.authorized(w, r) {
				return
			}
			ss := src(w)
			if ss == nil {
				return
			}
			name, err := f(r, ss)
			if err != nil {
				apiFail(w, shadowErr(err))
				return
			}
			s.cfg.Logger.Info("admin plugin change", "method", r.Method, "path", r.URL.Path, "plugin", name)
			answer(w, ss, name)
		}
	}
	s.mux.HandleFunc("POST /api/plugins/shadow", write(func(r *http.Request, ss ShadowSource) (string, error) {
		b, err := readBody(nil, r, maxShadowUpload)
		if err != nil {
			return "", err
		}
		name, err := ss.LoadShadowBytes(r.Context(), b)
		if err != nil && !errors.Is(err, host.ErrNoPlugin) {
			err = fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		return name, err
	}))
	s.mux.HandleFunc("DELETE /api/plugins/{name}/shadow", write(func(r *http.Request, ss ShadowSource) (string, error) {
		return r.PathValue("name"), ss.Unshadow(r.Context(), r.PathValue("name"))
	}))
	s.mux.HandleFunc("POST /api/plugins/{name}/promote", write(func(r *http.Request, ss ShadowSource) (string, error) {
		_, err := ss.Promote(r.Context(), r.PathValue("name"))
		return r.PathValue("name"), err
	}))
	s.mux.HandleFunc("POST /api/plugins/{name}/rollback", write(func(r *http.Request, ss ShadowSource) (string, error) {
		_, err := ss.Rollback(r.Context(), r.PathValue("name"))
		return r.PathValue("name"), err
	}))
	s.mux.HandleFunc("GET /api/plugins/{name}/shadow", func(w http.ResponseWriter, r *http.Request) {
		ss := src(w)
		if ss == nil {
			return
		}
		st, err := ss.ShadowDiff(r.PathValue("name"))
		if err != nil {
			apiFail(w, shadowErr(err))
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
}

// shadowErr maps the host's safe-change errors to API errors.
func shadowErr(err error) error {
	if errors.Is(err, host.ErrNoPlugin) || errors.Is(err, host.ErrNoShadow) {
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return err
}
