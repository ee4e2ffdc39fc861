package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/fabric-host/fabric/backend/postgres"
)

// ErrNotOnPostgres is returned (wrapped) by SDK calls the Postgres backend
// does not offer yet (pending and extra waitpoints, WaitForChildren,
// periodic schedules).
var ErrNotOnPostgres = errors.New("sdk: not available on the Postgres backend")

func errNotOnPostgres(op string) error { return fmt.Errorf("%w: %s", ErrNotOnPostgres, op) }

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
