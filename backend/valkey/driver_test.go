package valkey_test

import (
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
	backendtest.Run(t, func(t *testing.T) backend.Driver { return valkey.NewDriver(valkeytest.Client(t)) })
}
