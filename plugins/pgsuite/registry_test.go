package pgsuite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/sdk"
)

// TestWorkerRegistryOnPostgres: an SDK worker on Postgres registers in
// ff_worker_registry, refuses a second process with its instance id,
// heartbeats, and deregisters on Close; the pg_worker_registry_sweep
// plugin removes registrations whose TTL lapsed (a crashed worker) and
// leaves live ones.
func TestWorkerRegistryOnPostgres(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	pool := c.Pool()
	cfg := sdk.WorkerConfig{WorkerID: "reg", InstanceID: "reg-1", Namespace: "tenant", Lanes: []string{"r2", "r1"},
		LeaseTTL: 600 * time.Millisecond, Logger: pgtest.Logger()} // registry TTL 1.2 s, a heartbeat every 400 ms
	w, err := sdk.Connect(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var worker, lanes string
	var ttl, registered int64
	if err := pool.QueryRow(ctx, `SELECT worker_id, array_to_string(lanes, ','), liveness_ttl_ms, registered_at_ms FROM ff_worker_registry
 WHERE namespace = 'tenant' AND worker_instance_id = 'reg-1'`).Scan(&worker, &lanes, &ttl, &registered); err != nil {
		t.Fatalf("no registration: %v", err)
	}
	if worker != "reg" || lanes != "r1,r2" || ttl != 1200 {
		t.Fatalf("registered %s %s %d", worker, lanes, ttl)
	}
	if _, err := sdk.Connect(ctx, c, cfg); !errors.Is(err, sdk.ErrDuplicateInstance) {
		t.Fatalf("second process with a live instance id: %v", err)
	}
	pgtest.Eventually(t, 30*time.Second, "heartbeats", func() bool {
		return count(t, c, `SELECT count(*) FROM ff_worker_registry_event WHERE worker_instance_id = 'reg-1' AND event_kind = 'heartbeat'`) >= 2 &&
			count(t, c, `SELECT count(*) FROM ff_worker_registry WHERE worker_instance_id = 'reg-1' AND last_heartbeat_ms > $1`, registered) == 1
	})
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_worker_registry WHERE worker_instance_id = 'reg-1'`); n != 0 {
		t.Fatal("registration kept after Close")
	}
	if n := count(t, c, `SELECT count(*) FROM ff_worker_registry_event WHERE worker_instance_id = 'reg-1' AND event_kind = 'marked_dead' AND reason = 'worker closed'`); n != 1 {
		t.Fatalf("%d marked_dead events", n)
	}
	again, err := sdk.Connect(ctx, c, cfg)
	if err != nil {
		t.Fatalf("instance id not reusable after Close: %v", err)
	}
	again.Close(context.Background())

	// The plugins' clock runs an hour ahead: "crashed" lapsed long ago,
	// "live" lapses after the plugins' now.
	now := time.Now().UnixMilli()
	for id, at := range map[string]int64{"crashed": now - 60_000, "live": now + 2*3600_000} {
		if _, err := c.RegisterWorker(ctx, &postgres.RegisterWorkerParams{Namespace: "tenant", InstanceID: id, WorkerID: "reg",
			TTLMs: 1000, NowMs: at}); err != nil {
			t.Fatal(err)
		}
	}
	startHost(t, c, map[string]host.PluginConfig{"pg_worker_registry_sweep": {Interval: 100 * time.Millisecond}})
	pgtest.Eventually(t, time.Minute, "lapsed registration swept", func() bool {
		return count(t, c, `SELECT count(*) FROM ff_worker_registry WHERE worker_instance_id = 'crashed'`) == 0
	})
	if n := count(t, c, `SELECT count(*) FROM ff_worker_registry_event WHERE worker_instance_id = 'crashed' AND event_kind = 'ttl_swept'`); n != 1 {
		t.Fatalf("%d ttl_swept events", n)
	}
	if n := count(t, c, `SELECT count(*) FROM ff_worker_registry WHERE worker_instance_id = 'live'`); n != 1 {
		t.Fatal("a live registration was swept")
	}
}
