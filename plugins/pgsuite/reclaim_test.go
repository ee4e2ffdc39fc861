package pgsuite_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestCrashedWorkerReclaimedWithHost is issue 42's item 1 on Postgres:
// 20 executions without a retry policy, worker A claims all of them and
// crashes (its context ends, its leases are never renewed), then worker B
// runs on the lane beside a host running pg_lease_expiry and
// pg_attempt_timeout on the real clock. Every execution is reclaimed
// and completed by B, as attempt 1 of type "reclaim"; none expires (the
// attempt-timeout scanner took expired leases for timed-out attempts and
// raced the lease-expiry scanner: 19-20 of 20 ended expired).
func TestCrashedWorkerReclaimedWithHost(t *testing.T) {
	t.Parallel()
	const n = 20
	const lane = "crash"
	c := pgtest.Client(t, postgres.ClientConfig{Partitions: parts})
	ctx := pgtest.Context(t, 2*time.Minute)
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: c, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[model.ExecutionID]bool{}
	for range n {
		id, err := client.Enqueue(ctx, "crash.job", []byte("x"), sdk.WithLane(lane))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}

	actx, crash := context.WithCancel(ctx)
	a, err := sdk.Connect(actx, c, sdk.WorkerConfig{WorkerID: "a", Lanes: []string{lane}, Concurrency: n,
		LeaseTTL: 300 * time.Millisecond, DisableNotifications: true, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	var leases []*sdk.Lease
	pgtest.Eventually(t, 30*time.Second, "worker a claims all", func() bool {
		ls, err := a.ClaimBatch(actx, n-len(leases))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, ls...)
		return len(leases) == n
	})
	crash() // no cleanup: renewals stop, the leases stay
	for _, l := range leases {
		<-l.Context().Done()
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}

	every := host.PluginConfig{Interval: 100 * time.Millisecond}
	startHostAhead(t, c, map[string]host.PluginConfig{"pg_lease_expiry": every, "pg_attempt_timeout": every}, 0)

	b, err := sdk.Connect(ctx, c, sdk.WorkerConfig{WorkerID: "b", Lanes: []string{lane}, Concurrency: 4,
		Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[model.ExecutionID]*sdk.Job{}
	all := make(chan struct{})
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.Run(bctx, func(_ context.Context, j *sdk.Job) error {
			mu.Lock()
			defer mu.Unlock()
			got[j.ID] = j
			if len(got) == n {
				close(all)
			}
			return nil
		})
	}()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		mu.Lock()
		t.Errorf("worker b ran %d of %d within 60 s", len(got), n)
		mu.Unlock()
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	completed, expired := 0, 0
	for id := range ids {
		s, err := client.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch s.PublicState {
		case model.PublicCompleted:
			completed++
		case model.PublicExpired:
			expired++
		}
		j := got[id]
		if j == nil {
			continue
		}
		if j.AttemptType != "reclaim" || j.Attempt != 1 {
			t.Errorf("%s ran by b as attempt %d of type %q, want 1 reclaim", id, j.Attempt, j.AttemptType)
		}
	}
	t.Logf("%d of %d completed by b, %d expired", completed, n, expired)
	if completed != n || expired != 0 || len(got) != n {
		t.Fatalf("%d of %d completed (%d run by b), %d expired; want all completed by b, none expired", completed, n, len(got), expired)
	}
	if st := b.Stats(); st.Reclaimed != n {
		t.Fatalf("worker b stats %+v, want %d reclaimed", st, n)
	}
}
