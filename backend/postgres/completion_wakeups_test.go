package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

// insertCompletion commits one ff_completion_event row on partition pk,
// a flow member's when flow.
func insertCompletion(t *testing.T, c *postgres.Client, pk int, flow bool) {
	t.Helper()
	_, err := c.Pool().Exec(context.Background(), `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, occurred_at_ms)
 VALUES ($1, gen_random_uuid(), CASE WHEN $2 THEN gen_random_uuid() END, 'success', 0)`, pk, flow)
	if err != nil {
		t.Fatal(err)
	}
}

// nextWakeup returns the next partition on ch, failing after a minute.
func nextWakeup(t *testing.T, ch <-chan model.Partition) model.Partition {
	t.Helper()
	select {
	case p, ok := <-ch:
		if !ok {
			t.Fatal("wake-ups closed")
		}
		return p
	case <-time.After(time.Minute):
		t.Fatal("no wake-up within a minute")
	}
	return model.Partition{}
}

// TestCompletionWakeups: CompletionWakeups hands over the partition of
// each flow member's completion event (none for an event without a flow)
// from fabric's own fabric_completion NOTIFY — with FlowFabric's
// ff_completion trigger dropped it still does —, falls back to
// ff_completion on a database without fabric's trigger, and after losing
// its connection reads what was committed meanwhile (an event both read
// and notified may wake twice: harmless, a sweep finds nothing the
// second time).
func TestCompletionWakeups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		drop string // the trigger dropped before subscribing
	}{
		{"Direct", "ff_completion_event_notify_trg"},
		{"OldDatabase", "fabric_completion_event_notify_trg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := pgtest.Client(t, postgres.ClientConfig{})
			ctx := pgtest.Context(t, 3*time.Minute)
			if _, err := c.Pool().Exec(ctx, "DROP TRIGGER "+tc.drop+" ON ff_completion_event"); err != nil {
				t.Fatal(err)
			}
			insertCompletion(t, c, 3, true) // before: not handed over
			wake, stop, err := c.CompletionWakeups(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			insertCompletion(t, c, 5, false)
			insertCompletion(t, c, 7, true)
			if p := nextWakeup(t, wake); p != (model.Partition{Family: model.FamilyFlow, Index: 7}) {
				t.Fatalf("woke %v, want flow partition 7", p)
			}
			// Lose the listener's connection (every session of the
			// database but this one); what commits meanwhile still comes.
			if _, err := c.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
				t.Fatal(err)
			}
			pgtest.Eventually(t, time.Minute, "an event inserted after the connection loss", func() bool {
				_, err := c.Pool().Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, occurred_at_ms)
 VALUES (9, gen_random_uuid(), gen_random_uuid(), 'success', 0)`)
				return err == nil
			})
			if p := nextWakeup(t, wake); p != (model.Partition{Family: model.FamilyFlow, Index: 9}) {
				t.Fatalf("after the connection loss woke %v, want flow partition 9", p)
			}
		})
	}
}
