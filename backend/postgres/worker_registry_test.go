package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
)

// TestWorkerRegistry: register, refresh, refusal of a live or reassigned
// instance, heartbeats that never revive a lapsed registration, mark dead
// with its reason checks, listing, and the event log.
func TestWorkerRegistry(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	const ns, inst = "tenant", "worker-1"
	now := int64(1_000_000)
	p := &postgres.RegisterWorkerParams{Namespace: ns, InstanceID: inst, WorkerID: "w", Lanes: []string{"b", "a"},
		Capabilities: []string{"gpu", "arm"}, TTLMs: 1000, NowMs: now}
	register := func(p *postgres.RegisterWorkerParams, want string) {
		t.Helper()
		if st, err := c.RegisterWorker(ctx, p); err != nil || st != want {
			t.Fatalf("register at %d: %q, %v; want %q", p.NowMs, st, err, want)
		}
	}
	register(p, postgres.WorkerRegistered)
	var pk int16
	if err := c.Pool().QueryRow(ctx, "SELECT partition_key FROM ff_worker_registry WHERE worker_instance_id = $1", inst).Scan(&pk); err != nil || pk != 237 {
		t.Fatalf("partition_key %d, %v; want FNV-1a 64 of %q mod 256 = 237", pk, err, inst)
	}
	live := *p
	live.NowMs, live.RefuseLive = now+500, true
	register(&live, postgres.WorkerAlive)
	live.RefuseLive = false
	register(&live, postgres.WorkerRefreshed)
	other := *p
	other.WorkerID, other.NowMs = "someone-else", now+600
	if _, err := c.RegisterWorker(ctx, &other); !errors.Is(err, postgres.CodeInstanceReassigned) {
		t.Fatalf("reassigned instance: %v", err)
	}

	hb, err := c.HeartbeatWorker(ctx, ns, inst, now+1000)
	if err != nil || !hb.Registered || hb.NextExpiryMs != now+2000 {
		t.Fatalf("live heartbeat %+v, %v", hb, err)
	}
	if hb, err := c.HeartbeatWorker(ctx, ns, inst, now+2000); err != nil || hb.Registered {
		t.Fatalf("heartbeat of a lapsed registration revived it: %+v, %v", hb, err)
	}
	lapsed := *p
	lapsed.NowMs, lapsed.RefuseLive = now+3000, true
	register(&lapsed, postgres.WorkerRegistered) // a lapsed row is no duplicate

	ws, err := c.ListWorkers(ctx, ns, "", 0)
	if err != nil || len(ws) != 1 {
		t.Fatalf("list %+v, %v", ws, err)
	}
	if w := ws[0]; w.WorkerID != "w" || strings.Join(w.Lanes, ",") != "a,b" || strings.Join(w.Capabilities, ",") != "arm,gpu" ||
		w.LastHeartbeatMs != now+3000 || w.TTLMs != 1000 || w.RegisteredAtMs != now {
		t.Fatalf("listed %+v", w)
	}
	if _, err := c.ListWorkers(ctx, "", "", 0); !errors.Is(err, postgres.CodeInvalidInput) {
		t.Fatalf("list without namespace: %v", err)
	}

	for _, bad := range []string{strings.Repeat("x", postgres.MarkWorkerDeadReasonMax+1), "line\nbreak"} {
		if _, err := c.MarkWorkerDead(ctx, ns, inst, bad, now+3100); !errors.Is(err, postgres.CodeInvalidInput) {
			t.Fatalf("reason %q: %v", bad[:4], err)
		}
	}
	if found, err := c.MarkWorkerDead(ctx, ns, inst, "operator", now+3100); err != nil || !found {
		t.Fatalf("mark dead: %v, %v", found, err)
	}
	if found, err := c.MarkWorkerDead(ctx, ns, inst, "operator", now+3200); err != nil || found {
		t.Fatalf("mark dead twice: %v, %v", found, err)
	}
	var kinds, reason string
	if err := c.Pool().QueryRow(ctx, `SELECT string_agg(event_kind, ',' ORDER BY event_at_ms, event_kind),
  max(reason) FROM ff_worker_registry_event WHERE partition_key = $1 AND worker_instance_id = $2`, pk, inst).Scan(&kinds, &reason); err != nil {
		t.Fatal(err)
	}
	if kinds != "registered,registered,heartbeat,registered,marked_dead" || reason != "operator" {
		t.Fatalf("events %s (reason %q)", kinds, reason)
	}
}
