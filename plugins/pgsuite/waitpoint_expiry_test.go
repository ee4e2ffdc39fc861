package pgsuite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/sdk"
)

// TestPendingWaitpointAgreesWithExpiryPlugin: pending waitpoints the SDK
// creates on Postgres are what pg_pending_wp_expiry acts on. One whose
// ttl passed (the plugins' clock runs an hour ahead), with a signal
// buffered, is closed: a later signal is refused and unrecorded, and a
// suspend on it is refused with the lease kept. One the attempt
// suspended on (active now) and one whose ttl has not passed are left
// alone: the first resumes on a signal, the second still buffers and
// satisfies its suspend.
func TestPendingWaitpointAgreesWithExpiryPlugin(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: c, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sdk.Connect(ctx, c, sdk.WorkerConfig{WorkerID: "wpx", Lanes: []string{"wpx"}, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	// One lane: the three executions share its partition, so the scan
	// that closes the expired waitpoint also saw the other two.
	lease := func() *sdk.Lease {
		t.Helper()
		if _, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "wpx", Kind: "callback"}); err != nil {
			t.Fatal(err)
		}
		l, err := w.ClaimNext(ctx)
		if err != nil || l == nil {
			t.Fatalf("claim: %v %v", l, err)
		}
		return l
	}
	pending := func(l *sdk.Lease, key string, ttl time.Duration) *sdk.Waitpoint {
		t.Helper()
		wp, err := l.CreatePendingWaitpoint(ctx, key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return wp
	}
	signal := func(l *sdk.Lease, wp *sdk.Waitpoint) (*sdk.SignalResult, error) {
		return client.DeliverSignal(ctx, l.ID, sdk.Signal{WaitpointID: wp.ID, Token: wp.Token, Name: "done", Source: "test"})
	}

	expiring, committed, fresh := lease(), lease(), lease()
	expWP := pending(expiring, "cb:expiring", time.Minute)
	if r, err := signal(expiring, expWP); err != nil || r.Effect != backend.EffectBuffered {
		t.Fatalf("a signal to the pending waitpoint: %+v %v", r, err)
	}
	comWP := pending(committed, "cb:committed", time.Minute)
	if s, err := committed.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"done"}, Pending: comWP}); err != nil || s.AlreadySatisfied {
		t.Fatalf("suspend on the pending waitpoint: %+v %v", s, err)
	}
	freshWP := pending(fresh, "cb:fresh", 3*time.Hour)

	startHost(t, c, map[string]host.PluginConfig{"pg_pending_wp_expiry": {Interval: 100 * time.Millisecond}})
	pgtest.Eventually(t, time.Minute, "the expired waitpoint closed", func() bool {
		return count(t, c, `SELECT count(*) FROM ff_waitpoint_pending WHERE waitpoint_id = $1::uuid`, expWP.ID) == 0
	})

	before := count(t, c, `SELECT count(*) FROM ff_signal_event`)
	if _, err := signal(expiring, expWP); !errors.Is(err, backend.ErrWaitpointNotFound) {
		t.Fatalf("a signal to the closed waitpoint: %v, want ErrWaitpointNotFound", err)
	}
	if after := count(t, c, `SELECT count(*) FROM ff_signal_event`); after != before {
		t.Fatal("a refused signal was recorded")
	}
	if _, err := expiring.Suspend(ctx, sdk.SuspendSpec{Pending: expWP}); !errors.Is(err, backend.ErrWaitpointNotFound) {
		t.Fatalf("suspend on the closed waitpoint: %v, want ErrWaitpointNotFound", err)
	}
	if err := expiring.Complete(ctx, nil); err != nil {
		t.Fatalf("complete after the refused suspend: %v", err)
	}

	if n := count(t, c, `SELECT count(*) FROM ff_waitpoint_pending WHERE waitpoint_id = ANY($1::uuid[]) `,
		[]string{comWP.ID, freshWP.ID}); n != 2 {
		t.Fatalf("%d of the committed and the unexpired waitpoints left, want 2", n)
	}
	if r, err := signal(committed, comWP); err != nil || !r.Resumed {
		t.Fatalf("a signal to the committed waitpoint: %+v %v", r, err)
	}
	if r, err := signal(fresh, freshWP); err != nil || r.Effect != backend.EffectBuffered {
		t.Fatalf("a signal to the unexpired pending waitpoint: %+v %v", r, err)
	}
	if s, err := fresh.Suspend(ctx, sdk.SuspendSpec{Pending: freshWP}); err != nil || !s.AlreadySatisfied {
		t.Fatalf("suspend on the unexpired waitpoint: %+v %v", s, err)
	}
	if err := fresh.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
}
