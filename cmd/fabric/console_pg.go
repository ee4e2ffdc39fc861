package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
)

// startPGConsole serves the operator console of a Postgres run on addr:
// the console API and UI over the ff_* tables, and /status with the
// host's plugins (Postgres has no keyspace census). It prints the URL and
// returns a stop function; addr "" serves nothing.
func startPGConsole(ctx context.Context, out io.Writer, addr, tokenFile string, pc *postgres.Client, h *host.Host, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	token, err := readAdminToken(tokenFile)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	console := admin.NewConsoleHandler(admin.ConsoleConfig{Backend: admin.NewPGConsole(pc), AdminToken: token, Logger: log})
	mux.Handle("/", console)
	var src admin.PluginSource
	if h != nil {
		src = h
	}
	mux.HandleFunc("GET /api/plugins/{name}", admin.PluginDetailHandler(src))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(admin.BuildReport(time.Now(), "postgres", src, nil))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		// Another run holds the port: this one still runs, unobserved.
		fmt.Fprintf(out, "console not started: %v\n", err)
		return func() {}, nil
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("console server stopped", "addr", ln.Addr().String(), "error", err)
		}
	}()
	writes := "writes answer 501 on Postgres"
	if token == "" {
		writes = "read-only: no admin token"
	}
	fmt.Fprintf(out, "console: http://%s/ui/ (%s)\n", ln.Addr(), writes)
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
