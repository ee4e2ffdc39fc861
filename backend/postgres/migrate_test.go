package postgres_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
)

func TestMigrations(t *testing.T) {
	t.Parallel()

	t.Run("EmbeddedSet", func(t *testing.T) {
		ms := postgres.Migrations()
		if len(ms) != 21 {
			t.Fatalf("%d migrations, want 21", len(ms))
		}
		noTx := map[int64]bool{1: true, 2: true, 12: true, 13: true, 14: true, 17: true, 19: true, 20: true, 21: true}
		for i, m := range ms {
			if m.Version == 15 {
				t.Fatal("version 15 must not exist")
			}
			if i > 0 && m.Version <= ms[i-1].Version {
				t.Fatalf("not ordered at %s", m.Name)
			}
			if m.NoTx != noTx[m.Version] {
				t.Errorf("%s: NoTx %v", m.Name, m.NoTx)
			}
		}
		if got := len(ms[0].Chunks()); got != 15 {
			t.Errorf("0001 chunks %d, want 15 (tables + 13 partition sets + triggers)", got)
		}
		if ms[0].Description != "initial" || ms[2].Description != "dispatch outbox" {
			t.Errorf("descriptions %q %q", ms[0].Description, ms[2].Description)
		}
	})

	t.Run("IdempotentSecondRun", func(t *testing.T) {
		t.Parallel()
		ctx := pgtest.Context(t, time.Minute)
		pool := pgtest.Pool(t) // cloned from the template, migrated once already
		var out bytes.Buffer
		res, err := postgres.Migrate(ctx, pool, postgres.MigrateConfig{Progress: &out})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Applied) != 0 || res.Skipped != 21 || res.Version != 22 || len(res.Foreign) != 0 {
			t.Fatalf("second run: %+v\n%s", res, out.String())
		}
		if !strings.Contains(out.String(), "0001_initial: already applied") {
			t.Fatalf("progress:\n%s", out.String())
		}
		v, err := postgres.SchemaVersion(ctx, pool)
		if err != nil || v != postgres.LatestVersion() {
			t.Fatalf("schema version %d, %v", v, err)
		}
	})

	t.Run("SchemaMatchesUpstream", func(t *testing.T) {
		t.Parallel()
		ctx := pgtest.Context(t, time.Minute)
		pool := pgtest.Pool(t)
		// 26 partitioned parents, each with 256 hash children.
		var parents, children int
		if err := pool.QueryRow(ctx, `SELECT count(DISTINCT inhparent), count(*) FROM pg_inherits i
  JOIN pg_class p ON p.oid = i.inhparent WHERE p.relkind = 'p'`).Scan(&parents, &children); err != nil {
			t.Fatal(err)
		}
		if parents != 26 || children != 26*256 {
			t.Fatalf("%d parents, %d children", parents, children)
		}
		for _, rel := range []string{"ff_exec_core_p255", "ff_completion_event_p0", "ff_worker_registry_p000",
			"ff_worker_registry_event_p255", "ff_exec_core_lane_phase_idx", "ff_completion_event_lookup_idx",
			"ff_claim_grant_expiry_idx", "ff_worker_registry_ns_inst_idx", "ff_budget_policy_reset_due_idx"} {
			var n int
			pool.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = $1", rel).Scan(&n)
			if n != 1 {
				t.Errorf("relation %s missing", rel)
			}
		}
		var cols string
		pool.QueryRow(ctx, `SELECT string_agg(a.attname, ',' ORDER BY array_position(c.conkey, a.attnum))
  FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)
 WHERE c.conname = 'ff_worker_registry_event_pkey' AND c.conrelid = 'ff_worker_registry_event'::regclass`).Scan(&cols)
		if cols != "partition_key,namespace,worker_instance_id,event_at_ms,event_kind" {
			t.Errorf("worker event pk %q", cols)
		}
		var ledger, annotations int
		pool.QueryRow(ctx, "SELECT count(*) FROM _sqlx_migrations WHERE success AND length(checksum) = 48").Scan(&ledger)
		pool.QueryRow(ctx, "SELECT count(*) FROM ff_migration_annotation").Scan(&annotations)
		if ledger != 21 || annotations != 18 { // 0018, 0021, 0022 write no annotation
			t.Errorf("ledger %d, annotations %d", ledger, annotations)
		}
		for _, col := range []string{"started_at_ms", "lease_reclaim_count"} {
			var n int
			pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'ff_exec_core' AND column_name = $1`, col).Scan(&n)
			if n != 1 {
				t.Errorf("ff_exec_core.%s missing", col)
			}
		}
	})
}
