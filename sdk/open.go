package sdk

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
)

// Open connects to the backend url names and returns a ready Client that
// owns the connection (Close closes it). The URL picks the driver, which
// the program imports for its side effect, as with database/sql:
//
//	import _ "github.com/fabric-host/fabric/backend/valkey"   // redis://, rediss://, valkey://, valkeys://, …+cluster://, unix://
//	import _ "github.com/fabric-host/fabric/backend/postgres" // postgres://, postgresql://
//
//	c, err := sdk.Open(ctx, "redis://localhost:6379", sdk.ClientConfig{})
//	defer c.Close()
//	w, err := c.NewWorker(ctx, sdk.WorkerConfig{WorkerID: "mailer", Lanes: []string{"emails"}})
//
// It readies the backend as `fabric run` does, with the same refusals: on
// Valkey the flowfabric library is loaded (or upgraded) and a new
// deployment's partition config written; on Postgres the schema is
// checked (backend.ErrNotMigrated, naming `fabric migrate`, when it is
// missing or older than this fabric). cfg.Backend must be nil: the URL
// is the backend. Neither the URL nor its password is quoted in an error.
func Open(ctx context.Context, url string, cfg ClientConfig) (*Client, error) {
	if cfg.Backend != nil || cfg.Postgres != nil {
		return nil, fmt.Errorf("%w: sdk.Open takes its backend from the URL; leave ClientConfig.Backend nil (or call NewClient)", ErrInvalidInput)
	}
	b, err := backend.Open(ctx, url, backend.OpenConfig{Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("sdk: open: %w", err)
	}
	cfg.Backend = b
	c, err := NewClient(ctx, cfg)
	if err != nil {
		b.Close()
		return nil, err
	}
	c.owned = b
	return c, nil
}

// NewWorker validates cfg and registers a worker instance on the client's
// backend, over the client's connection: Connect(ctx, backend, cfg). The
// worker's Close does not close the connection; the client's does.
func (c *Client) NewWorker(ctx context.Context, cfg WorkerConfig) (*Worker, error) {
	return Connect(ctx, c.prov, cfg)
}

// Close stops Wait's watch of terminal transitions (a Wait in flight
// then reads its state every 250 ms) and closes the connection Open
// made. A Client from NewClient does not own its backend, and Close
// leaves it open.
func (c *Client) Close() {
	c.waits.stop()
	if c.owned != nil {
		c.owned.Close()
	}
}
