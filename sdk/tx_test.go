package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/sdk"
)

// TestEnqueueTx: on Postgres an execution enqueued in the caller's
// transaction commits with the caller's own row — invisible, unclaimable
// and unannounced until the commit, claimed exactly once after it, with
// the eligible NOTIFY delivered at the commit — and a rollback leaves
// nothing of it. Valkey answers ErrUnsupported; a tx of another type is
// invalid input.
func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	pc := pgtest.Client(t, postgres.ClientConfig{})
	ctx := valkeytest.Context(t, 3*time.Minute)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "tx", Lanes: []string{"tx"}, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	if _, err := pc.Pool().Exec(ctx, `CREATE TABLE app_orders (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	listen, err := pc.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Release()
	if _, err := listen.Exec(ctx, "LISTEN "+postgres.EligibleChannel); err != nil {
		t.Fatal(err)
	}
	notified := func(within time.Duration) bool {
		nctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		_, err := listen.Conn().WaitForNotification(nctx)
		return err == nil
	}
	unclaimed := func(when string) {
		t.Helper()
		if l, err := w.ClaimNext(ctx); err != nil || l != nil {
			t.Fatalf("%s: claimed %v %v", when, l, err)
		}
	}

	// Commit: the order and its execution together.
	tx, err := pc.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO app_orders VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	id, err := c.EnqueueTx(ctx, tx, "order.ship", []byte(`{"order":1}`), sdk.WithLane("tx"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.State(ctx, id); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("state before the commit: %v", err)
	}
	unclaimed("before the commit")
	if notified(300 * time.Millisecond) {
		t.Fatal("an eligible NOTIFY before the commit")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !notified(10 * time.Second) {
		t.Fatal("no eligible NOTIFY after the commit")
	}
	l, err := w.ClaimNext(ctx)
	if err != nil || l == nil || l.ID != id {
		t.Fatalf("claim after the commit: %+v %v, want %s", l, err, id)
	}
	if err := l.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	unclaimed("after the one claim")

	// Rollback: nothing remains.
	tx, err = pc.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := c.EnqueueTx(ctx, tx, "order.ship", nil, sdk.WithLane("tx"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State(ctx, gone); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("state after the rollback: %v", err)
	}
	unclaimed("after the rollback")

	if _, err := c.EnqueueTx(ctx, "not a tx", "k", nil, sdk.WithLane("tx")); !errors.Is(err, backend.ErrInvalidInput) {
		t.Fatalf("a tx of another type: %v", err)
	}
	vc, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: valkeytest.Client(t), Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vc.EnqueueTx(ctx, nil, "k", nil, sdk.WithLane("tx")); !errors.Is(err, backend.ErrUnsupported) {
		t.Fatalf("Valkey: %v", err)
	}
}
