package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/internal/redact"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// backendFlags are the flags every command that talks to Valkey shares.
type backendFlags struct {
	url       string
	logLevel  string
	logFormat string
	// partitions, when set, are the deployment's partition counts (fabric
	// run's --partitions or config file); zero means FlowFabric's defaults.
	partitions model.PartitionConfig
	// logOut, when set, receives logs instead of stderr (the live view
	// keeps them off the screen it draws).
	logOut io.Writer
}

func addBackendFlags(fs *flag.FlagSet) *backendFlags {
	b := &backendFlags{}
	fs.StringVar(&b.url, "valkey-url", "", "Valkey/Redis URL (redis://host:port, unix:///path) or a cluster (valkey+cluster://host:port,host:port,...). Empty: start a private server child for this run.")
	fs.StringVar(&b.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fs.StringVar(&b.logFormat, "log-format", "text", "log format: text or json (log/slog)")
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
	out := env.stderr
	if b.logOut != nil {
		out = b.logOut
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch b.logFormat {
	case "text", "":
		return slog.New(slog.NewTextHandler(out, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, b.logFormat)
}

func (b *backendFlags) connect(ctx context.Context, env *cliEnv) (*backendConn, error) {
	log, err := b.logger(env)
	if err != nil {
		return nil, err
	}
	conn := &backendConn{Logger: log, Where: redact.URL(b.url)}
	url := b.url
	if url == "" {
		srv, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: log})
		if err != nil {
			return nil, err
		}
		conn.Server, url = srv, srv.URL()
		conn.Where = fmt.Sprintf("private %s (pid %d, %s)", srv.Binary(), srv.PID(), srv.Socket())
	}
	cl, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, Logger: log, Partitions: b.partitions})
	if err != nil {
		if conn.Server != nil {
			conn.Server.Stop()
		}
		return nil, err
	}
	conn.Client = cl
	return conn, nil
}

// valkeyCompleted is a built valkey-go command.
type valkeyCompleted = vk.Completed
