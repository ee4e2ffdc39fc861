package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

// ErrNoDriver: Open was given a URL whose scheme no imported driver
// registered. The error names the scheme and the import that serves it.
var ErrNoDriver = errors.New("backend: no driver for the URL's scheme")

// OpenConfig configures Open.
type OpenConfig struct {
	// Logger receives the client's logs (slog.Default() when nil).
	Logger *slog.Logger
}

// Opened is a client Open connected: a Provider the caller closes.
type Opened interface {
	Provider
	// Close closes the client's connections.
	Close()
}

// OpenFunc connects a driver's client to the backend url names and
// readies it as `fabric run` does (Valkey: the function library loaded,
// the partition config written on a new deployment; Postgres: the schema
// checked, ErrNotMigrated otherwise). Drivers register one with Register.
type OpenFunc func(ctx context.Context, url string, cfg OpenConfig) (Opened, error)

var (
	openersMu sync.RWMutex
	openers   = map[string]OpenFunc{}
)

// Register makes Open serve URLs of the given schemes with open. A driver
// package calls it from init, so importing the driver (if only for its
// side effect, as with database/sql) is what lets Open reach its backend.
// Registering a scheme twice panics.
func Register(open OpenFunc, schemes ...string) {
	openersMu.Lock()
	defer openersMu.Unlock()
	for _, s := range schemes {
		if _, dup := openers[s]; dup {
			panic("backend: Register called twice for scheme " + s)
		}
		openers[s] = open
	}
}

// Open connects to the backend url names through the driver registered
// for its scheme: redis://, rediss://, valkey://, valkeys://, their
// +cluster forms and unix:// with backend/valkey imported; postgres:// and
// postgresql:// with backend/postgres imported. Neither the URL nor its
// password appears in an error of Open's own.
func Open(ctx context.Context, url string, cfg OpenConfig) (Opened, error) {
	scheme, _, ok := strings.Cut(url, "://")
	if !ok || scheme == "" {
		return nil, fmt.Errorf("backend: open: the URL has no scheme (want one of %s)", knownSchemes())
	}
	scheme = strings.ToLower(scheme)
	openersMu.RLock()
	open := openers[scheme]
	openersMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w %q%s (registered: %s)", ErrNoDriver, scheme, driverFor(scheme), knownSchemes())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return open(ctx, url, cfg)
}

// driverFor names the import that registers scheme, for ErrNoDriver;
// "" for a scheme no fabric driver serves.
func driverFor(scheme string) string {
	switch base, _ := strings.CutSuffix(scheme, "+cluster"); base {
	case "postgres", "postgresql":
		return `: import _ "github.com/fabric-host/fabric/backend/postgres"`
	case "redis", "rediss", "valkey", "valkeys", "unix":
		return `: import _ "github.com/fabric-host/fabric/backend/valkey"`
	}
	return ""
}

// knownSchemes lists the registered schemes, sorted, for messages.
func knownSchemes() string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	if len(openers) == 0 {
		return "none: no driver package is imported"
	}
	s := make([]string, 0, len(openers))
	for k := range openers {
		s = append(s, k+"://")
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}
