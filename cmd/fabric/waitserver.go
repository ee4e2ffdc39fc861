package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fabric-host/fabric/internal/admin"
)

// waitServer answers on the admin address while `fabric run` waits for
// its backend (--backend-wait): /healthz and /readyz are 503 with what it
// waits for, /status is a report naming the backend and the wait. It
// gives the address up before the admin server proper takes it.
type waitServer struct {
	ln    net.Listener
	srv   *http.Server
	done  chan struct{}
	where string
	// scheme is http:// or https://.
	scheme string

	mu     sync.Mutex
	reason string
}

// startWaitServer listens on addr with the admin server's limits and
// Host check (hosts: the names it answers to besides the loopback ones);
// the error is the listener's.
func startWaitServer(addr string, tc *tls.Config, hosts []string, where string) (*waitServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	w := &waitServer{ln: ln, where: where, done: make(chan struct{}), scheme: "http://"}
	plain := ln
	if tc != nil {
		ln, w.scheme = tls.NewListener(ln, tc), "https://"
	}
	mux := http.NewServeMux()
	unavailable := func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(rw).Encode(map[string]string{"status": "unavailable", "error": w.why()})
	}
	mux.HandleFunc("GET /healthz", unavailable)
	mux.HandleFunc("GET /readyz", unavailable)
	mux.HandleFunc("GET /status", func(rw http.ResponseWriter, _ *http.Request) {
		rep := admin.BuildReport(time.Now(), where, nil, nil)
		rep.Error = w.why()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(rep)
	})
	w.srv = admin.NewHTTPServer(plain, mux, admin.HTTPOptions{Hosts: hosts})
	go func() {
		defer close(w.done)
		if err := w.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return
		}
	}()
	return w, nil
}

// Addr is the address listened on.
func (w *waitServer) Addr() string { return w.ln.Addr().String() }

// URL is the scheme and address listened on.
func (w *waitServer) URL() string { return w.scheme + w.Addr() }

// set records the latest reason the backend is not reachable.
func (w *waitServer) set(reason string) {
	w.mu.Lock()
	w.reason = reason
	w.mu.Unlock()
}

func (w *waitServer) why() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return "waiting for backend " + w.where + ": " + w.reason
}

// Stop closes the listener and waits for the server to finish.
func (w *waitServer) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
	<-w.done
}
