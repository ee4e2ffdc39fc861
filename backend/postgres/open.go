package postgres

import (
	"context"

	"github.com/fabric-host/fabric/backend"
)

// init registers the Postgres schemes with backend.Open (and so sdk.Open).
func init() {
	backend.Register(open, "postgres", "postgresql")
}

// open is backend.Open's Postgres driver: Connect, then the schema
// checked as `fabric run` checks an external database (CheckSchema: a
// database not migrated, or migrated by an older fabric, is refused with
// backend.ErrNotMigrated and the command that fixes it). It migrates
// nothing: that is `fabric migrate`'s (or Migrate's) decision.
func open(ctx context.Context, url string, cfg backend.OpenConfig) (backend.Opened, error) {
	c, err := Connect(ctx, ClientConfig{URL: url, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if err := CheckSchema(ctx, c.Pool()); err != nil {
		c.Close()
		return nil, mapErr(err, false)
	}
	return c, nil
}
