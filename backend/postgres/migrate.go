package postgres

import (
	"bytes"
	"context"
	"crypto/sha512"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// fabricFS holds fabric's own tables (FabricObjects).
//
//go:embed migrations/fabric/*.sql
var fabricFS embed.FS

// FabricObject is one of fabric's own schema files beside FlowFabric's
// migrations (migrations/fabric/NAME.sql).
type FabricObject struct {
	// Name is the file name without ".sql".
	Name string
	// SQL creates the objects, idempotently (IF NOT EXISTS).
	SQL string
}

// FabricObjects are fabric's own tables, in file-name order. Like
// ExtraIndexes, Migrate creates them once FlowFabric's migrations are
// applied and records them in no ledger, so FlowFabric sharing the
// database finds only its own versions there; FlowFabric ignores them.
func FabricObjects() []FabricObject {
	ents, err := fs.ReadDir(fabricFS, "migrations/fabric")
	if err != nil {
		panic(fmt.Sprintf("postgres: embedded fabric objects: %v", err))
	}
	out := make([]FabricObject, 0, len(ents))
	for _, e := range ents {
		b, err := fabricFS.ReadFile("migrations/fabric/" + e.Name())
		if err != nil {
			panic(fmt.Sprintf("postgres: embedded fabric object %s: %v", e.Name(), err))
		}
		out = append(out, FabricObject{Name: strings.TrimSuffix(e.Name(), ".sql"), SQL: string(b)})
	}
	return out
}

// LedgerTable is the migration ledger. It is sqlx's table, with sqlx's
// columns and row conventions (version, description from the file name,
// SHA-384 checksum of upstream's file: UpstreamMigrations), so FlowFabric
// and fabric can migrate and share one database.
const LedgerTable = "_sqlx_migrations"

// noTxDirective on a migration's first line splits it at lines that are
// exactly "COMMIT;" and runs each chunk in its own transaction (the ledger
// row goes with the last one), the way sqlx applies such files.
const noTxDirective = "-- no-transaction"

// Migration is one embedded schema migration.
type Migration struct {
	// Version is the numeric file-name prefix (1..22; 15 does not exist).
	Version int64
	// Name is the file name without ".sql", e.g. "0001_initial".
	Name string
	// Description is what the ledger records: the name after the version
	// with underscores as spaces, e.g. "initial".
	Description string
	// NoTx marks a file applied in per-chunk transactions.
	NoTx bool
	// SQL is the file's text.
	SQL string
	// Checksum is what the ledger records: the SHA-384 of upstream's file
	// of this version (UpstreamMigrations), which creates the same schema.
	Checksum []byte
	// FileChecksum is the SHA-384 of fabric's own file, which fabric
	// recorded before it recorded upstream's; Migrate rewrites such rows.
	FileChecksum []byte
}

// LedgerDescription is sqlx's ledger description of a migration file:
// the name after the version prefix, without ".sql", with underscores as
// spaces ("0003_dispatch_outbox.sql" → "dispatch outbox").
func LedgerDescription(file string) string {
	_, rest, _ := strings.Cut(strings.TrimSuffix(file, ".sql"), "_")
	return strings.ReplaceAll(rest, "_", " ")
}

// Chunks returns the statements groups applied in one transaction each: the
// whole file, or for a NoTx file the parts between "COMMIT;" lines.
func (m Migration) Chunks() []string {
	if !m.NoTx {
		return []string{m.SQL}
	}
	var out []string
	var cur strings.Builder
	flush := func() {
		if s := strings.TrimSpace(stripComments(cur.String())); s != "" {
			out = append(out, cur.String())
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(m.SQL, "\n") {
		if strings.TrimSpace(line) == "COMMIT;" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return out
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			b.WriteString(t)
		}
	}
	return b.String()
}

// Migrations returns the embedded migrations in version order.
//
// # Notes
//
//   - Panics when an embedded file has no upstream file of the same name
//     in UpstreamMigrations (a build mistake the tests catch).
func Migrations() []Migration {
	upstream := map[int64]UpstreamMigration{}
	for _, u := range UpstreamMigrations {
		upstream[u.Version] = u
	}
	ents, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic(fmt.Sprintf("postgres: embedded migrations: %v", err))
	}
	var out []Migration
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".sql")
		prefix, _, ok := strings.Cut(name, "_")
		v, err := strconv.ParseInt(prefix, 10, 64)
		if !ok || err != nil {
			panic(fmt.Sprintf("postgres: migration file %q lacks a numeric prefix", e.Name()))
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic(fmt.Sprintf("postgres: embedded migration %s: %v", e.Name(), err))
		}
		u, ok := upstream[v]
		if !ok || u.File != e.Name() {
			panic(fmt.Sprintf("postgres: migration %s has no upstream file of that name (UpstreamMigrations)", e.Name()))
		}
		want, err := hex.DecodeString(u.Checksum)
		if err != nil || len(want) != sha512.Size384 {
			panic(fmt.Sprintf("postgres: upstream checksum of %s is not a SHA-384 in hex", u.File))
		}
		sum := sha512.Sum384(b)
		out = append(out, Migration{
			Version: v, Name: name, Description: LedgerDescription(u.File),
			NoTx: bytes.HasPrefix(b, []byte(noTxDirective)), SQL: string(b), Checksum: want, FileChecksum: sum[:],
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// LatestVersion is the highest embedded migration version.
func LatestVersion() int64 {
	ms := Migrations()
	return ms[len(ms)-1].Version
}

// ErrDirtyMigration is returned when the ledger records a migration that
// failed half-way (success = false); an operator must repair it first.
var ErrDirtyMigration = errors.New("postgres: migration ledger has a failed (dirty) migration")

// ErrNotMigrated is returned by CheckSchema for a database without
// fabric's schema: run `fabric migrate` (or Migrate) first.
var ErrNotMigrated = errors.New("postgres: database not migrated")

// CheckSchema reports ErrNotMigrated, with the command that fixes it,
// when the database lacks the schema (ff_exec_core) or its migration
// ledger stops short of the embedded migrations (LatestVersion), so a
// client used before `fabric migrate` says so instead of failing later
// with `relation "ff_..." does not exist`. A database whose tables exist
// without a ledger (created by other means) passes.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var present bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('ff_exec_core') IS NOT NULL").Scan(&present); err != nil {
		return fmt.Errorf("postgres: check schema: %w", err)
	}
	if !present {
		return fmt.Errorf("%w: it has no ff_exec_core table; run `fabric migrate --postgres-url URL` (or postgres.Migrate) first", ErrNotMigrated)
	}
	v, err := SchemaVersion(ctx, pool)
	if err != nil {
		return fmt.Errorf("postgres: check schema: %w", err)
	}
	if latest := LatestVersion(); v > 0 && v < latest {
		return fmt.Errorf("%w: its schema is at version %d and this fabric needs %d; run `fabric migrate --postgres-url URL` (or postgres.Migrate) first",
			ErrNotMigrated, v, latest)
	}
	return nil
}

// notMigrated turns an undefined_table error (SQLSTATE 42P01) on one of
// fabric's ff_ tables into ErrNotMigrated naming `fabric migrate`: the
// database lost its schema, or never had it, after the client's check.
// Other errors pass unchanged.
func notMigrated(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "42P01" || !(strings.HasPrefix(pe.Message, `relation "ff_`) || strings.HasPrefix(pe.Message, `relation "fabric_`)) {
		return err
	}
	return fmt.Errorf("%w: %w; run `fabric migrate --postgres-url URL` (or postgres.Migrate)", ErrNotMigrated, err)
}

// ExtraIndex is an index of fabric's own beside FlowFabric's schema.
type ExtraIndex struct {
	// Name is the index name (on the partitioned parent).
	Name string
	// SQL creates it: CREATE INDEX IF NOT EXISTS.
	SQL string
}

// ExtraIndexes are fabric's access paths beyond FlowFabric's schema:
// indexes only, no table or column, so the data model stays upstream's.
// Migrate creates them (IF NOT EXISTS) once the migrations are applied and
// records them in no ledger, so FlowFabric sharing the database still
// finds only its own versions there. A database that FlowFabric migrated
// lacks them; every query works without them, only slower.
var ExtraIndexes = []ExtraIndex{{
	// The claim's order (ClaimForWorker: a lane's eligible executions by
	// priority, then age) as an index: without it a claim reads and sorts
	// every runnable row of the lane (2 ms at a backlog of 2,000, measured);
	// with it the first eligible entry. Partial, so only the transitions
	// into runnable/eligible_now write it.
	Name: "fabric_exec_core_claim_idx",
	SQL: `CREATE INDEX IF NOT EXISTS fabric_exec_core_claim_idx
    ON ff_exec_core (partition_key, lane_id, priority DESC, created_at_ms)
 WHERE lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now'`,
}, {
	// The attempt-timeout scan (pgsql.AttemptTimeoutScan) by the
	// attempt's own deadline: partial, so only attempts with a timeout
	// that have not ended are in it.
	Name: "fabric_attempt_deadline_idx",
	SQL: `CREATE INDEX IF NOT EXISTS fabric_attempt_deadline_idx
    ON ff_attempt (partition_key, ((raw_fields->>'attempt_deadline_ms')::bigint))
 WHERE raw_fields ? 'attempt_deadline_ms' AND terminal_at_ms IS NULL`,
}}

// MigrateConfig configures Migrate.
type MigrateConfig struct {
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// Target stops after this version; 0 means all.
	Target int64
}

// MigrateResult reports what Migrate did.
type MigrateResult struct {
	// Applied are the versions applied by this call, in order.
	Applied []int64
	// Skipped counts versions already in the ledger.
	Skipped int
	// Relabelled are versions an older fabric recorded with its own file's
	// checksum; their rows now carry upstream's (the schema is the same).
	Relabelled []int64
	// Foreign are versions recorded with a checksum that is neither
	// upstream's v0.15 file nor fabric's: another revision of the file
	// (or CRLF line endings). They are left alone.
	Foreign []int64
	// Unknown are ledger versions fabric has no file for (a newer
	// FlowFabric); they are left alone.
	Unknown []int64
	// Version is the highest successfully applied version afterwards.
	Version int64
}

// LockID is the advisory lock key held while migrating database db: sqlx's
// key, so fabric and FlowFabric migrating one database serialize.
func LockID(db string) int64 {
	return 0x3d32ad9e * int64(crc32.ChecksumIEEE([]byte(db)))
}

// Migrate applies the embedded migrations that the ledger does not record
// yet, in version order, each in a transaction together with its ledger
// row (per chunk for NoTx files). Running it again is a no-op. A
// Postgres advisory lock serializes concurrent migrators.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg MigrateConfig) (*MigrateResult, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	return MigrateConn(ctx, conn.Conn(), cfg)
}

// MigrateConn is Migrate on one dedicated connection.
func MigrateConn(ctx context.Context, conn *pgx.Conn, cfg MigrateConfig) (*MigrateResult, error) {
	out := cfg.Progress
	if out == nil {
		out = io.Discard
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	lock := LockID(db)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lock); err != nil {
		return nil, fmt.Errorf("postgres: migrate: advisory lock: %w", err)
	}
	defer func() {
		// Released on a fresh context so a cancelled ctx does not leak the
		// session lock on a pooled connection.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", lock)
	}()

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+LedgerTable+` (
    version        bigint PRIMARY KEY,
    description    text NOT NULL,
    installed_on   timestamptz NOT NULL DEFAULT now(),
    success        boolean NOT NULL,
    checksum       bytea NOT NULL,
    execution_time bigint NOT NULL
)`); err != nil {
		return nil, fmt.Errorf("postgres: migrate: ledger table: %w", err)
	}
	type row struct {
		success  bool
		checksum []byte
	}
	applied := map[int64]row{}
	rows, err := conn.Query(ctx, "SELECT version, success, checksum FROM "+LedgerTable+" ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: read ledger: %w", err)
	}
	for rows.Next() {
		var v int64
		var r row
		if err := rows.Scan(&v, &r.success, &r.checksum); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: migrate: read ledger: %w", err)
		}
		if !r.success {
			rows.Close()
			return nil, fmt.Errorf("%w: version %d", ErrDirtyMigration, v)
		}
		applied[v] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: migrate: read ledger: %w", err)
	}

	res := &MigrateResult{}
	known := map[int64]bool{}
	ms := Migrations()
	for _, m := range ms {
		known[m.Version] = true
	}
	for v := range applied {
		if !known[v] {
			res.Unknown = append(res.Unknown, v)
		}
	}
	sort.Slice(res.Unknown, func(i, j int) bool { return res.Unknown[i] < res.Unknown[j] })
	for _, v := range res.Unknown {
		fmt.Fprintf(out, "warning: ledger version %d has no fabric migration (newer FlowFabric?); left alone\n", v)
	}

	for _, m := range ms {
		if cfg.Target > 0 && m.Version > cfg.Target {
			break
		}
		if r, ok := applied[m.Version]; ok {
			res.Skipped++
			switch {
			case bytes.Equal(r.checksum, m.Checksum):
				fmt.Fprintf(out, "%s: already applied\n", m.Name)
			case bytes.Equal(r.checksum, m.FileChecksum):
				if _, err := conn.Exec(ctx, "UPDATE "+LedgerTable+" SET checksum = $2 WHERE version = $1 AND checksum = $3",
					m.Version, m.Checksum, m.FileChecksum); err != nil {
					return res, fmt.Errorf("postgres: migrate: relabel ledger version %d: %w", m.Version, err)
				}
				res.Relabelled = append(res.Relabelled, m.Version)
				fmt.Fprintf(out, "%s: already applied; ledger checksum set to upstream's\n", m.Name)
			default:
				res.Foreign = append(res.Foreign, m.Version)
				fmt.Fprintf(out, "warning: %s: already applied with a checksum of another file revision; left alone\n", m.Name)
			}
			continue
		}
		start := time.Now()
		chunks := m.Chunks()
		fmt.Fprintf(out, "%s: applying (%d transaction(s))...\n", m.Name, len(chunks))
		for i, chunk := range chunks {
			last := i == len(chunks)-1
			if err := applyChunk(ctx, conn, m, chunk, last, start); err != nil {
				return res, fmt.Errorf("postgres: migration %s (part %d/%d): %w", m.Name, i+1, len(chunks), err)
			}
		}
		res.Applied = append(res.Applied, m.Version)
		fmt.Fprintf(out, "%s: applied in %s\n", m.Name, time.Since(start).Round(time.Millisecond))
	}
	if err := conn.QueryRow(ctx, "SELECT COALESCE(MAX(version), 0) FROM "+LedgerTable+" WHERE success").Scan(&res.Version); err != nil {
		return res, fmt.Errorf("postgres: migrate: read version: %w", err)
	}
	if cfg.Target == 0 || cfg.Target >= LatestVersion() {
		for _, o := range FabricObjects() {
			if _, err := conn.Exec(ctx, o.SQL); err != nil {
				return res, fmt.Errorf("postgres: migrate: fabric %s: %w", o.Name, describePgError(err))
			}
			fmt.Fprintf(out, "fabric %s: present\n", o.Name)
		}
		for _, x := range ExtraIndexes {
			if _, err := conn.Exec(ctx, x.SQL); err != nil {
				return res, fmt.Errorf("postgres: migrate: index %s: %w", x.Name, describePgError(err))
			}
			fmt.Fprintf(out, "%s: present\n", x.Name)
		}
	}
	fmt.Fprintf(out, "schema at version %d (%d applied, %d already present)\n", res.Version, len(res.Applied), res.Skipped)
	return res, nil
}

// applyChunk runs one chunk in a transaction; the last chunk also writes
// the ledger row, so a migration is recorded only once all of it committed.
func applyChunk(ctx context.Context, conn *pgx.Conn, m Migration, chunk string, last bool, start time.Time) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // no-op after Commit
	// No arguments: pgx sends the simple protocol, which accepts the
	// multi-statement text of a migration file.
	if _, err := tx.Exec(ctx, chunk); err != nil {
		return describePgError(err)
	}
	if last {
		if _, err := tx.Exec(ctx, "INSERT INTO "+LedgerTable+
			" (version, description, success, checksum, execution_time) VALUES ($1, $2, true, $3, $4)",
			m.Version, m.Description, m.Checksum, time.Since(start).Nanoseconds()); err != nil {
			return fmt.Errorf("ledger insert: %w", err)
		}
	}
	return tx.Commit(ctx)
}

func describePgError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Errorf("%w (SQLSTATE %s, position %d)", err, pe.Code, pe.Position)
	}
	return err
}

// SchemaVersion returns the highest successfully applied ledger version, 0
// when the ledger table does not exist.
func SchemaVersion(ctx context.Context, q Querier) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, "SELECT COALESCE(MAX(version), 0) FROM "+LedgerTable+" WHERE success").Scan(&v)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: schema version: %w", err)
	}
	return v, nil
}

// Querier is what pgx.Conn, pgx.Tx and pgxpool.Pool have in common.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
