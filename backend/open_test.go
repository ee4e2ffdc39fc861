package backend_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/backend"
)

// TestOpenWithoutDriver: a program that imports no driver gets
// ErrNoDriver from Open, naming the import that serves the scheme.
func TestOpenWithoutDriver(t *testing.T) {
	_, err := backend.Open(context.Background(), "redis://localhost:6379", backend.OpenConfig{})
	if !errors.Is(err, backend.ErrNoDriver) || !strings.Contains(err.Error(), `"github.com/fabric-host/fabric/backend/valkey"`) {
		t.Fatalf("Open with no driver imported: %v", err)
	}
	_, err = backend.Open(context.Background(), "no-scheme", backend.OpenConfig{})
	if err == nil || !strings.Contains(err.Error(), "no scheme") {
		t.Fatalf("Open of a URL without a scheme: %v", err)
	}
}
