// Package fabrictest is a kit for testing programs that use fabric's SDK,
// in the spirit of River's rivertest: throwaway backends, one job run in
// the test's goroutine, a lane drained, and what was enqueued asserted.
//
//	func TestMain(m *testing.M) { os.Exit(fabrictest.Main(m)) }
//
//	func TestSignup(t *testing.T) {
//		c := fabrictest.Valkey(t) // or fabrictest.Postgres(t)
//		id, _ := sdk.EnqueueArgs(ctx, c, WelcomeEmail{To: "a@b"}, sdk.WithLane("emails"))
//		fabrictest.RequireEnqueued(t, c, fabrictest.Enqueued{Kind: "email.welcome", Lane: "emails"})
//		fabrictest.Drain(t, c, "emails", mux.ServeJob)
//		st, _ := c.State(ctx, id) // completed
//	}
//
// The servers are real: a private valkey-server (or Debian's
// redis-server) started once per test binary, each test on a fresh
// database of it; a throwaway Postgres 15 cluster (/usr/lib/postgresql/*
// or initdb on PATH) started once per test binary, each test on a fresh
// migrated database. Main stops them.
package fabrictest

import (
	"context"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

// Main runs m's tests and then stops the servers the kit started: call it
// from TestMain, as os.Exit(fabrictest.Main(m)).
func Main(m *testing.M) int {
	code := valkeytest.Run(m)
	if pgtest.Stop() != 0 {
		code = 1
	}
	return code
}

// setupTimeout bounds a backend's setup: a first Postgres cluster is an
// initdb and the migrations.
const setupTimeout = 3 * time.Minute

// Valkey returns a client on a fresh database of the kit's private
// server, with the function library loaded and a waitpoint secret
// installed (as sdk.Open readies a deployment); it is closed when tb ends.
func Valkey(tb testing.TB) *sdk.Client {
	tb.Helper()
	vc := valkeytest.Client(tb)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := vc.InstallWaitpointHMACSecret(ctx, "6661627269637465737420736563726574"); err != nil {
		tb.Fatalf("fabrictest: waitpoint secret: %v", err)
	}
	return newClient(tb, ctx, vc)
}

// Postgres returns a client on a fresh migrated database of the kit's
// throwaway cluster; it is closed when tb ends.
func Postgres(tb testing.TB) *sdk.Client {
	tb.Helper()
	pc := pgtest.Client(tb, postgres.ClientConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	return newClient(tb, ctx, pc)
}

// newClient is an SDK client on b, closed when tb ends.
func newClient(tb testing.TB, ctx context.Context, b backend.Provider) *sdk.Client {
	tb.Helper()
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: b, Logger: valkeytest.Logger()})
	if err != nil {
		tb.Fatalf("fabrictest: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// drainLimit bounds Drain: a handler that enqueues on its own lane
// forever would otherwise never let it return.
const drainLimit = 10_000

// Drain runs h, in the test's goroutine, on every execution of lane that
// is eligible, one after the other (sdk.Worker.WorkNext), until none is
// — work the handlers enqueue on the lane included; delayed ones and
// retries waiting for their backoff are not eligible yet — and returns
// how many it ran. The handlers' errors end their attempts as a worker's
// would and are not test failures; a failure to claim is.
func Drain(tb testing.TB, c *sdk.Client, lane string, h sdk.Handler) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	w, err := c.NewWorker(ctx, sdk.WorkerConfig{WorkerID: "fabrictest-drain", Lanes: []string{lane}, Logger: valkeytest.Logger()})
	if err != nil {
		tb.Fatalf("fabrictest: drain %s: %v", lane, err)
	}
	defer w.Close(context.Background())
	for n := 0; n < drainLimit; n++ {
		id, err := w.WorkNext(ctx, h)
		switch {
		case id == "" && err != nil:
			tb.Fatalf("fabrictest: drain %s: %v", lane, err)
		case id == "":
			return n
		}
	}
	tb.Fatalf("fabrictest: drain %s: still eligible work after %d executions", lane, drainLimit)
	return drainLimit
}
