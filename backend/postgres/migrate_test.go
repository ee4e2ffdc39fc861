package postgres_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
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
		if ms[0].Description != "initial" || ms[2].Description != "dispatch outbox" || ms[20].Description != "worker registry event pk" {
			t.Errorf("descriptions %q %q %q", ms[0].Description, ms[2].Description, ms[20].Description)
		}
		// Every embedded migration is upstream's file of that version, and
		// the ledger checksum is upstream's, not fabric's file's.
		if len(postgres.UpstreamMigrations) != len(ms) {
			t.Fatalf("%d upstream migrations, %d embedded", len(postgres.UpstreamMigrations), len(ms))
		}
		for i, m := range ms {
			u := postgres.UpstreamMigrations[i]
			if u.Version != m.Version || u.File != m.Name+".sql" || !strings.HasPrefix(u.File, fmt.Sprintf("%04d_", u.Version)) {
				t.Errorf("embedded %d %s, upstream %d %s", m.Version, m.Name, u.Version, u.File)
			}
			if got := hex.EncodeToString(m.Checksum); got != u.Checksum || len(m.Checksum) != 48 {
				t.Errorf("%s: ledger checksum %s, upstream %s", m.Name, got, u.Checksum)
			}
			if bytes.Equal(m.Checksum, m.FileChecksum) {
				t.Errorf("%s: fabric's file checksum equals upstream's", m.Name)
			}
			if m.Description != postgres.LedgerDescription(u.File) {
				t.Errorf("%s: description %q", m.Name, m.Description)
			}
		}
	})

	t.Run("LedgerCarriesUpstreamChecksums", func(t *testing.T) {
		t.Parallel()
		ctx := pgtest.Context(t, time.Minute)
		pool := pgtest.Pool(t) // migrated by Migrate
		rows, err := pool.Query(ctx, "SELECT version, description, encode(checksum, 'hex'), success FROM _sqlx_migrations ORDER BY version")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var v int64
			var desc, sum string
			var ok bool
			if err := rows.Scan(&v, &desc, &sum, &ok); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%d|%s|%s|%v", v, desc, sum, ok))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, u := range postgres.UpstreamMigrations {
			want = append(want, fmt.Sprintf("%d|%s|%s|true", u.Version, postgres.LedgerDescription(u.File), u.Checksum))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("ledger rows:\n%s\nwant (upstream's):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("OwnChecksumsRelabelledForeignLeftAlone", func(t *testing.T) {
		t.Parallel()
		ctx := pgtest.Context(t, time.Minute)
		pool := pgtest.Pool(t)
		ms := postgres.Migrations()
		own, foreign := ms[3], ms[5]
		other := bytes.Repeat([]byte{7}, 48)
		// An older fabric recorded its own file's checksum; another
		// migrator recorded some other revision's.
		for _, u := range []struct {
			v   int64
			sum []byte
		}{{own.Version, own.FileChecksum}, {foreign.Version, other}} {
			if _, err := pool.Exec(ctx, "UPDATE _sqlx_migrations SET checksum = $2 WHERE version = $1", u.v, u.sum); err != nil {
				t.Fatal(err)
			}
		}
		res, err := postgres.Migrate(ctx, pool, postgres.MigrateConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(res.Relabelled) != fmt.Sprint([]int64{own.Version}) || fmt.Sprint(res.Foreign) != fmt.Sprint([]int64{foreign.Version}) || len(res.Applied) != 0 {
			t.Fatalf("%+v", res)
		}
		check := func(v int64, want []byte) {
			var sum []byte
			if err := pool.QueryRow(ctx, "SELECT checksum FROM _sqlx_migrations WHERE version = $1", v).Scan(&sum); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sum, want) {
				t.Errorf("version %d checksum %x, want %x", v, sum, want)
			}
		}
		check(own.Version, own.Checksum)
		check(foreign.Version, other)
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

// A database without fabric's schema is named as such, with the command
// that fixes it, instead of failing later on a missing relation.
func TestCheckSchema(t *testing.T) {
	t.Parallel()
	bare := pgtest.Dial(t, pgtest.NewDatabase(t, false))
	migrated := pgtest.Pool(t)
	// Migrating a database to version 10 takes a while on a loaded
	// machine: the test gets its own budget for it.
	ctx := pgtest.Context(t, 5*time.Minute)
	err := postgres.CheckSchema(ctx, bare)
	if !errors.Is(err, postgres.ErrNotMigrated) || !strings.Contains(err.Error(), "fabric migrate") {
		t.Fatalf("unmigrated database: %v", err)
	}
	if err := postgres.CheckSchema(ctx, migrated); err != nil {
		t.Fatalf("migrated database: %v", err)
	}
	// Migrated by an older fabric: the version it is at and the one
	// needed are named.
	partial := pgtest.Dial(t, pgtest.NewDatabase(t, false))
	if _, err := postgres.Migrate(ctx, partial, postgres.MigrateConfig{Target: 10}); err != nil {
		t.Fatal(err)
	}
	err = postgres.CheckSchema(ctx, partial)
	if want := fmt.Sprintf("version 10 and this fabric needs %d", postgres.LatestVersion()); !errors.Is(err, postgres.ErrNotMigrated) ||
		!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "fabric migrate") {
		t.Fatalf("partly migrated database: %v, want %q", err, want)
	}
	// A schema lost after the check: an operation's missing relation is
	// ErrNotMigrated too, not a bare SQLSTATE 42P01.
	lost := pgtest.NewDatabase(t, true)
	c, err := postgres.Connect(ctx, postgres.ClientConfig{URL: lost, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Pool().Exec(ctx, "DROP TABLE ff_exec_core"); err != nil {
		t.Fatal(err)
	}
	id := model.DefaultPartitionConfig().NewSoloExecutionID("lost")
	_, err = c.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, LaneID: "lost", Namespace: "ns", ExecutionKind: "k"})
	if !errors.Is(err, postgres.ErrNotMigrated) || !strings.Contains(err.Error(), "fabric migrate") {
		t.Fatalf("create on a lost schema: %v", err)
	}
	if _, err := c.ExecutionFields(ctx, id); !errors.Is(err, postgres.ErrNotMigrated) {
		t.Fatalf("read on a lost schema: %v", err)
	}
}
