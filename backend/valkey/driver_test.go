package valkey_test

import (
	"context"
	"testing"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/backendtest"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// TestDriverConformance runs the backend.Driver conformance suite on the
// Valkey driver against a real server.
func TestDriverConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(t *testing.T) backend.Driver {
		c := valkeytest.Client(t)
		// Suspension needs the deployment's waitpoint secret (Postgres
		// seeds its own keystore).
		if err := c.InstallWaitpointHMACSecret(context.Background(), "00112233445566778899aabbccddeeff"); err != nil {
			t.Fatal(err)
		}
		return valkey.NewDriver(c)
	})
}
