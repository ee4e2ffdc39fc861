package sdk

import (
	"context"
	"errors"

	"github.com/fabric-host/fabric/backend/postgres"
)

// ErrNotOnPostgres was returned by SDK calls the Postgres backend did not
// offer.
//
// Deprecated: no SDK call returns it: every operation goes through the
// backend contract on both backends, and the one a backend lacks answers
// backend.ErrUnsupported (lane spreading on Postgres).
var ErrNotOnPostgres = errors.New("sdk: not available on the Postgres backend")

// ConnectPostgres is Connect(ctx, pc, cfg).
//
// Deprecated: call Connect, which takes either backend's client.
func ConnectPostgres(ctx context.Context, pc *postgres.Client, cfg WorkerConfig) (*Worker, error) {
	if pc == nil {
		return nil, invalid("backend", "a *postgres.Client is required")
	}
	return Connect(ctx, pc, cfg)
}

// pgCode reports a logical error of the Postgres backend (not worth
// retrying as a transport failure).
func pgCode(err error) bool {
	var code postgres.ErrorCode
	return errors.As(err, &code)
}

// pgLeaseGone reports Postgres errors that mean the lease cannot come
// back.
func pgLeaseGone(err error) bool {
	for _, c := range []postgres.ErrorCode{postgres.CodeStaleLease, postgres.CodeLeaseExpired,
		postgres.CodeExecutionNotActive, postgres.CodeExecutionNotFound} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}
