package valkey

import (
	"context"

	"github.com/fabric-host/fabric/backend"
)

// init registers the Valkey schemes with backend.Open (and so sdk.Open).
func init() {
	backend.Register(open, "redis", "rediss", "valkey", "valkeys",
		"redis+cluster", "rediss+cluster", "valkey+cluster", "valkeys+cluster", "unix")
}

// open is backend.Open's Valkey driver: Dial, then what a host does at
// start for a client — the flowfabric library loaded (or upgraded), and on
// a new deployment the partition config written (the defaults) — and the
// client bound to the deployment's partition config.
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
		return nil
	}
	return c.EnsurePartitionConfig(ctx)
}
