package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/fabric-host/fabric/backend/valkey"
)

// backendFlags are the flags every command that talks to Valkey shares.
type backendFlags struct {
	url      string
	logLevel string
}

func addBackendFlags(fs *flag.FlagSet) *backendFlags {
	b := &backendFlags{}
	fs.StringVar(&b.url, "valkey-url", "", "Valkey/Redis URL (redis://host:port, unix:///path). Empty: start a private server child for this run.")
	fs.StringVar(&b.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	return b
}

// backendConn is a connected client and, when no URL was given, the private
// server it runs on.
type backendConn struct {
	Client *valkey.Client
	Server *valkey.Server
	Where  string
	Logger *slog.Logger
}

// Close closes the client and stops the private server, if any.
func (c *backendConn) Close() {
	c.Client.Close()
	if c.Server != nil {
		c.Server.Stop()
	}
}

func (b *backendFlags) logger(env *cliEnv) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(b.logLevel)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, b.logLevel)
	}
	return slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: lvl})), nil
}

func (b *backendFlags) connect(ctx context.Context, env *cliEnv) (*backendConn, error) {
	log, err := b.logger(env)
	if err != nil {
		return nil, err
	}
	conn := &backendConn{Logger: log, Where: b.url}
	url := b.url
	if url == "" {
		srv, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: log})
		if err != nil {
			return nil, err
		}
		conn.Server, url = srv, srv.URL()
		conn.Where = fmt.Sprintf("private %s (pid %d, %s)", srv.Binary(), srv.PID(), srv.Socket())
	}
	cl, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, Logger: log})
	if err != nil {
		if conn.Server != nil {
			conn.Server.Stop()
		}
		return nil, err
	}
	conn.Client = cl
	return conn, nil
}
