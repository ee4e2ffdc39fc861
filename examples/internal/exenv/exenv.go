// Package exenv connects fabric's examples to a server: the one
// $FABRIC_VALKEY_URL names, or a private redis-server/valkey-server child
// started for the run.
package exenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/fabric-host/fabric/backend/valkey"
)

// Connect returns a client with the flowfabric library loaded (and, on a
// private server, the partition config written) and a function that
// closes it (and stops the private server, if one was started).
func Connect(ctx context.Context) (*valkey.Client, func(), error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	url := os.Getenv("FABRIC_VALKEY_URL")
	var srv *valkey.Server
	if url == "" {
		s, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("start a private server (or set FABRIC_VALKEY_URL): %w", err)
		}
		srv, url = s, s.URL()
	}
	stop := func() {
		if srv != nil {
			srv.Stop()
		}
	}
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, Logger: log})
	if err != nil {
		stop()
		return nil, nil, err
	}
	// A private server is a new deployment: initialise it as a host would
	// (ff:config:partitions), so that clients find their partition counts
	// instead of warning that none are stored.
	if srv != nil {
		if err := vc.EnsurePartitionConfig(ctx); err != nil {
			vc.Close()
			stop()
			return nil, nil, err
		}
	}
	if _, err := vc.EnsureLibrary(ctx); err != nil {
		vc.Close()
		stop()
		return nil, nil, err
	}
	return vc, func() { vc.Close(); stop() }, nil
}
