package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestConnectTakesEitherBackend: one Connect and one NewClient take
// either backend's client or its backend.Driver, dispatch on it (the
// worker and client report that backend's driver) and refuse a missing
// backend with ErrInvalidInput.
func TestConnectTakesEitherBackend(t *testing.T) {
	t.Parallel()
	vc := valkeytest.Client(t)
	pc := pgtest.Client(t, postgres.ClientConfig{Partitions: model.PartitionConfig{Flow: 8, Budget: 2, Quota: 2}})
	ctx := pgtest.Context(t, time.Minute)
	for _, tc := range []struct {
		name string
		b    backend.Provider
		want string
	}{
		{"valkey client", vc, "valkey"},
		{"valkey driver", valkey.NewDriver(vc), "valkey"},
		{"postgres client", pc, "postgres"},
		{"postgres driver", postgres.NewDriver(pc), "postgres"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := sdk.Connect(ctx, tc.b, sdk.WorkerConfig{WorkerID: "connect", Lanes: []string{"connect"},
				Logger: valkeytest.Logger()})
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			defer func() { _ = w.Close(context.Background()) }()
			if got := w.BackendName(); got != tc.want {
				t.Errorf("worker backend %q, want %q", got, tc.want)
			}
			c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: tc.b, Logger: valkeytest.Logger()})
			if err != nil {
				t.Fatalf("NewClient: %v", err)
			}
			if got := c.BackendName(); got != tc.want {
				t.Errorf("client backend %q, want %q", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		b    backend.Provider
	}{
		{"nil", nil},
		{"nil valkey client", (*valkey.Client)(nil)},
		{"nil postgres client", (*postgres.Client)(nil)},
		{"nil valkey driver", (*valkey.Driver)(nil)},
	} {
		if _, err := sdk.Connect(ctx, tc.b, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}}); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("Connect(%s): %v, want ErrInvalidInput", tc.name, err)
		}
		if _, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: tc.b}); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("NewClient(%s): %v, want ErrInvalidInput", tc.name, err)
		}
	}
}
