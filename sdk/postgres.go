package sdk

import (
	"context"
	"errors"

	"github.com/fabric-host/fabric/backend"
)

// ErrNotOnPostgres was returned by SDK calls the Postgres backend did not
// offer.
//
// Deprecated: no SDK call returns it: every operation goes through the
// backend contract on both backends, and the one a backend lacks answers
// backend.ErrUnsupported (lane spreading on Postgres).
var ErrNotOnPostgres = errors.New("sdk: not available on the Postgres backend")

// ConnectPostgres is Connect(ctx, pc, cfg); pc is the *postgres.Client.
//
// Deprecated: call Connect, which takes either backend's client.
func ConnectPostgres(ctx context.Context, pc backend.Provider, cfg WorkerConfig) (*Worker, error) {
	return Connect(ctx, pc, cfg)
}
