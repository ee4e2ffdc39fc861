// Package pgtest gives tests a real Postgres: one throwaway cluster per test
// binary, started on first use and stopped by Run, a template database
// migrated once, and a fresh database cloned from that template per test
// (CREATE DATABASE ... TEMPLATE), so parallel tests never see each other's
// rows and every test starts from the full schema.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
//
// # Notes
//
//   - The cluster runs as an unprivileged user when tests run as root
//     (postgres.ServerConfig.RunAs).
//   - Run fails the binary (exit code 1) when the cluster leaves a process
//     or its directory behind after Stop.
//   - A migrated database is ~250 MB (26 parents × 256 partitions); each
//     test database is dropped when its test ends.
package pgtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/internal/childproc"
	"github.com/fabric-host/fabric/internal/testbackend"
)

// TemplateDB is the migrated template every test database is cloned from.
const TemplateDB = "fabric_template"

var (
	mu       sync.Mutex
	shared   *postgres.Server
	startErr error
	createMu sync.Mutex // CREATE DATABASE from one template, one at a time
	nextDB   atomic.Int64
)

// Run runs the tests, stops the shared cluster and checks that it left no
// process or directory behind.
func Run(m *testing.M) int {
	code := m.Run()
	if Stop() != 0 {
		code = 1
	}
	return code
}

// Stop stops the shared cluster, if one was started, and checks that it
// left no process or directory behind: 1 when it did (said on stderr),
// else 0. It is Run's ending, for a TestMain that runs its tests through
// another helper's Run (valkeytest.Run) and uses both backends.
func Stop() int {
	mu.Lock()
	defer mu.Unlock()
	if shared == nil {
		return 0
	}
	code := 0
	pid, dir := shared.PID(), shared.Dir()
	if err := shared.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stop cluster: %v\n", err)
		code = 1
	}
	if err := CheckGone(pid, dir); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		code = 1
	}
	shared = nil
	return code
}

// CheckGone reports an error when the postmaster pid, any process of its
// process group, or dir still exists.
func CheckGone(pid int, dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("cluster directory %s left behind", dir)
	}
	if pid == 0 {
		return nil
	}
	// The postmaster leads its process group (childproc.Attr).
	if p := childproc.LiveGroupMember(pid); p != 0 {
		return fmt.Errorf("cluster process %d (group %d) still running after Stop", p, pid)
	}
	return nil
}

// Logger returns a logger for tests: silent unless FABRIC_TEST_LOG is set.
func Logger() *slog.Logger { return testbackend.Logger() }

// Server returns the shared cluster, starting it and migrating the
// template on first use.
func Server(tb testing.TB) *postgres.Server {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && startErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared, startErr = postgres.StartServer(ctx, postgres.ServerConfig{Logger: Logger()})
		if startErr == nil {
			startErr = migrateTemplate(ctx, shared)
		}
	}
	if startErr != nil {
		tb.Fatalf("pgtest: %v", startErr)
	}
	return shared
}

func migrateTemplate(ctx context.Context, s *postgres.Server) error {
	admin, err := pgxpool.New(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+TemplateDB); err != nil {
		return fmt.Errorf("create template: %w", err)
	}
	p, err := pgxpool.New(ctx, s.URL(TemplateDB))
	if err != nil {
		return err
	}
	var progress io.Writer = io.Discard
	if os.Getenv("FABRIC_TEST_LOG") != "" {
		progress = os.Stderr
	}
	_, err = postgres.Migrate(ctx, p, postgres.MigrateConfig{Progress: progress})
	p.Close() // a template must have no connections when cloned
	if err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return nil
}

// NewDatabase creates a fresh database cloned from the migrated template
// (or empty, when migrated is false) and returns its URL; it is dropped when
// the test ends.
func NewDatabase(tb testing.TB, migrated bool) string {
	tb.Helper()
	s := Server(tb)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), nextDB.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgxpool.New(ctx, s.URL("postgres"))
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer admin.Close()
	stmt := "CREATE DATABASE " + name
	if migrated {
		stmt += " TEMPLATE " + TemplateDB + " STRATEGY FILE_COPY"
	}
	createMu.Lock()
	_, err = admin.Exec(ctx, stmt)
	createMu.Unlock()
	if err != nil {
		tb.Fatalf("pgtest: %s: %v", stmt, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a, err := pgxpool.New(ctx, s.URL("postgres"))
		if err != nil {
			return
		}
		defer a.Close()
		a.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return s.URL(name)
}

// Pool returns a pool on a fresh migrated database, closed when the test
// ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return Dial(tb, NewDatabase(tb, true))
}

// Dial opens a pool on url, closed when the test ends.
func Dial(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatalf("pgtest: dial %s: %v", url, err)
	}
	tb.Cleanup(p.Close)
	return p
}

// Client returns a backend client on a fresh migrated database, closed when
// the test ends.
func Client(tb testing.TB, cfg postgres.ClientConfig) *postgres.Client {
	tb.Helper()
	if cfg.URL == "" {
		cfg.URL = NewDatabase(tb, true)
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := postgres.Connect(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Context returns a context that ends with the test (and after at most d).
func Context(tb testing.TB, d time.Duration) context.Context { return testbackend.Context(tb, d) }

// Eventually polls cond every few milliseconds until it returns true or d
// passes, then fails the test with msg. It is the poll-with-deadline tests
// use instead of sleeping for a guessed duration.
func Eventually(tb testing.TB, d time.Duration, msg string, cond func() bool) {
	tb.Helper()
	testbackend.Eventually(tb, "pgtest", d, msg, cond)
}
