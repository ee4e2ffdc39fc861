// Package valkeytest gives tests a real redis-server/valkey-server: one
// shared server per test binary, started on first use and stopped by Run,
// and a fresh logical database per test so parallel tests never see each
// other's keys. Functions libraries and pub/sub are server-wide, so tests
// that assert on published messages filter by their own ids.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }
package valkeytest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/internal/testbackend"
)

// databases is the number of logical databases of the shared server; each
// test takes one.
const databases = 4096

var (
	mu      sync.Mutex
	shared  *valkey.Server
	nextDB  atomic.Int64
	loadErr error
	loaded  bool
)

// Run runs the tests and stops the shared server (and the shared cluster,
// if a test started it) afterwards.
func Run(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	if shared != nil {
		shared.Stop()
	}
	mu.Unlock()
	stopSharedCluster()
	return code
}

// Logger returns a logger for tests: silent unless FABRIC_TEST_LOG is set.
func Logger() *slog.Logger { return testbackend.Logger() }

// Server returns the shared server, starting it on first use.
func Server(tb testing.TB) *valkey.Server {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if shared == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := valkey.StartServer(ctx, valkey.ServerConfig{Databases: databases, Logger: Logger()})
		if err != nil {
			tb.Fatalf("valkeytest: start server: %v", err)
		}
		shared = s
	}
	return shared
}

// NewServer starts a private server for a test that must restart, kill or
// flush it; it is stopped when the test ends.
func NewServer(tb testing.TB) *valkey.Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: Logger()})
	if err != nil {
		tb.Fatalf("valkeytest: start server: %v", err)
	}
	tb.Cleanup(func() { s.Stop() })
	return s
}

// Client returns a client on a fresh, empty logical database of the shared
// server with the flowfabric library loaded; it is closed when the test
// ends.
func Client(tb testing.TB) *valkey.Client {
	tb.Helper()
	s := Server(tb)
	db := int(nextDB.Add(1) % databases)
	c := Dial(tb, s.URL(), db)
	ctx := context.Background()
	if err := c.Raw().Do(ctx, c.Raw().B().Flushdb().Build()).Error(); err != nil {
		tb.Fatalf("valkeytest: FLUSHDB %d: %v", db, err)
	}
	mu.Lock()
	if !loaded {
		_, loadErr = c.EnsureLibrary(ctx)
		loaded = loadErr == nil
	}
	err := loadErr
	mu.Unlock()
	if err != nil {
		tb.Fatalf("valkeytest: load library: %v", err)
	}
	return c
}

// Dial connects a client to url on database db, closed when the test ends.
func Dial(tb testing.TB, url string, db int) *valkey.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, DB: db, Logger: Logger()})
	if err != nil {
		tb.Fatalf("valkeytest: dial %s db %d: %v", url, db, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Context returns a context that ends with the test (and after at most d).
func Context(tb testing.TB, d time.Duration) context.Context { return testbackend.Context(tb, d) }

// Must fails the test on err.
func Must[T any](tb testing.TB, v T, err error) T {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return v
}

// Sprint is fmt.Sprint, for building ARGV in tests.
func Sprint(v any) string { return fmt.Sprint(v) }

// Eventually polls cond every few milliseconds until it returns true or d
// passes, then fails the test with msg. It is the poll-with-deadline tests
// use instead of sleeping for a guessed duration.
func Eventually(tb testing.TB, d time.Duration, msg string, cond func() bool) {
	tb.Helper()
	testbackend.Eventually(tb, "valkeytest", d, msg, cond)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	for range 1000 {
		p := 20000 + rand.IntN(25000)
		if portFree(p) {
			return p
		}
	}
	tb.Fatal("valkeytest: no free loopback port")
	return 0
}

// NewTCPServer starts a private server listening on a free loopback port
// (as well as its unix socket) with extra command-line arguments, e.g.
// "--requirepass", "pw" or TLS options; it is stopped when the test ends.
func NewTCPServer(tb testing.TB, extraArgs ...string) *valkey.Server {
	tb.Helper()
	return NewServerOnPort(tb, FreePort(tb), extraArgs...)
}

// NewServerOnPort is NewTCPServer on a given port, for a test that
// starts the server after its client (see FreePort).
func NewServerOnPort(tb testing.TB, port int, extraArgs ...string) *valkey.Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := valkey.StartServer(ctx, valkey.ServerConfig{Port: port, ExtraArgs: extraArgs, Logger: Logger()})
	if err != nil {
		tb.Fatalf("valkeytest: start server: %v", err)
	}
	tb.Cleanup(func() { s.Stop() })
	return s
}
