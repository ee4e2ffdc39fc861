package valkey

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/fabric-host/fabric/backend"
)

// init registers the Valkey schemes with backend.Open (and so sdk.Open).
func init() {
	backend.Register(open, "redis", "rediss", "valkey", "valkeys",
		"redis+cluster", "rediss+cluster", "valkey+cluster", "valkeys+cluster", "unix")
}

// open is backend.Open's Valkey driver: Dial, then what a host does at
// start for a client — the flowfabric library loaded (or upgraded); on a
// new deployment the partition config written (the defaults) and a random
// waitpoint HMAC secret installed where a flow partition has none (a
// stored one is kept, as `fabric run` keeps it) — and the client bound to
// the deployment's partition config.
func open(ctx context.Context, url string, cfg backend.OpenConfig) (backend.Opened, error) {
	c, err := Dial(ctx, ClientConfig{URL: url, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if err := readyForClients(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// readyForClients loads the library and adopts (or, on a new deployment,
// writes) ff:config:partitions, so that c routes as every other client.
func readyForClients(ctx context.Context, c *Client) error {
	if _, err := c.EnsureLibrary(ctx); err != nil {
		return err
	}
	parts, found, err := c.ReadPartitionConfig(ctx)
	if err != nil {
		return err
	}
	if found {
		c.parts = parts
	} else if err := c.EnsurePartitionConfig(ctx); err != nil {
		return err
	}
	return ensureWaitpointSecret(ctx, c)
}

// ensureWaitpointSecret installs a random waitpoint HMAC secret on the
// flow partitions that have none, saying so at info: waitpoint tokens are
// HMACs under it, and every server of a deployment must share it, so a
// stored secret always wins (InstallWaitpointHMACSecret keeps it).
func ensureWaitpointSecret(ctx context.Context, c *Client) error {
	missing, err := c.WaitpointHMACMissing(ctx)
	if err != nil || missing == 0 {
		return err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("valkey: waitpoint secret: %w", err)
	}
	c.log.Info("waitpoint HMAC secret: none stored; installing a random one (set one with fabric run --waitpoint-hmac-secret to choose it)",
		"where", c.where, "partitions_missing", missing)
	return c.InstallWaitpointHMACSecret(ctx, hex.EncodeToString(b))
}
