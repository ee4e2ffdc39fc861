package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/model"
)

// postgresSoakTarget is the soak on a private Postgres cluster, migrated,
// with synchronous_commit on for the soak's database: a kill -9 of the
// cluster then loses no commit it acknowledged (the throwaway cluster
// keeps fsync off, which only an operating system crash would tell).
func postgresSoakTarget(t *testing.T, ctx context.Context) *soakTarget {
	srv, err := postgres.StartServer(ctx, postgres.ServerConfig{MaxConnections: 300, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	url := srv.URL("postgres")
	setup := pgtest.Dial(t, url)
	if _, err := postgres.Migrate(ctx, setup, postgres.MigrateConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "ALTER DATABASE postgres SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	setup.Close()
	pc, err := postgres.Connect(ctx, postgres.ClientConfig{URL: url, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	stock, err := filepath.Glob(filepath.Join("..", "..", "bin", "plugins", "pg_*.wasm"))
	if err != nil || len(stock) == 0 {
		t.Fatalf("no pg_* plugins in bin/plugins (%v): run `make plugins` first", err)
	}
	var plugins []string
	for _, p := range stock {
		plugins = append(plugins, strings.TrimSuffix(filepath.Base(p), ".wasm"))
	}
	return &soakTarget{name: "postgres", provider: pc,
		hostArgs: func(int) []string { return []string{"--postgres-url", url} },
		plugins:  plugins,
		restarts: [3]soakServerFault{{"fast restart (as pg_ctl restart -m fast)", srv.RestartGracefully},
			{"kill -9 (WAL recovery)", srv.Restart}, {"fast restart (as pg_ctl restart -m fast)", srv.RestartGracefully}},
		phases: func(ctx context.Context, ids []model.ExecutionID) ([]string, error) { return pgPhases(ctx, pc, ids) },
		check: func(t *testing.T, ctx context.Context, ids []model.ExecutionID) {
			checkPGCompletedOnce(t, ctx, pc, ids)
		},
		describe: func(t *testing.T, ids []model.ExecutionID) { describePGUnfinished(t, pc, ids, 5) },
	}
}

// uuids is ids as their bare uuids.
func uuids(ids []model.ExecutionID) []string {
	u := make([]string, len(ids))
	for i, id := range ids {
		u[i] = id.UUIDString()
	}
	return u
}

// pgPhases is valkeyPhases on Postgres.
func pgPhases(ctx context.Context, pc *postgres.Client, ids []model.ExecutionID) ([]string, error) {
	rows, err := pc.Pool().Query(ctx, `SELECT execution_id::text, lifecycle_phase, eligibility_state FROM ff_exec_core WHERE execution_id = ANY($1::uuid[])`, uuids(ids))
	if err != nil {
		return nil, fmt.Errorf("read phases: %w", err)
	}
	defer rows.Close()
	by := make(map[string]string, len(ids))
	for rows.Next() {
		var id, ph, elig string
		if err := rows.Scan(&id, &ph, &elig); err != nil {
			return nil, fmt.Errorf("read phases: %w", err)
		}
		by[id] = phaseOf(ph, elig)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read phases: %w", err)
	}
	phases := make([]string, len(ids))
	for i, id := range ids {
		phases[i] = by[id.UUIDString()]
	}
	return phases, nil
}

// checkPGCompletedOnce is checkCompletedOnce on Postgres: every execution
// of ids completed, with exactly one completion event (ff_completion_event:
// one, its outcome success), the database holds no execution but
// these, and the audit finds all of them terminal and nothing left behind.
func checkPGCompletedOnce(t *testing.T, ctx context.Context, pc *postgres.Client, ids []model.ExecutionID) {
	t.Helper()
	states, err := pgQueryMap(ctx, pc, `SELECT execution_id::text, public_state FROM ff_exec_core`)
	if err != nil {
		t.Fatalf("read executions: %v", err)
	}
	events, err := pgQueryMap(ctx, pc, `SELECT execution_id::text, string_agg(outcome, ',') FROM ff_completion_event GROUP BY 1`)
	if err != nil {
		t.Fatalf("read completion events: %v", err)
	}
	var doubled []string
	for id := range states {
		if events[id] != "success" {
			doubled = append(doubled, fmt.Sprintf("%s: completion events %q", id, events[id]))
		}
	}
	var notCompleted []string
	for _, id := range ids {
		if st := states[id.UUIDString()]; st != "completed" {
			notCompleted = append(notCompleted, fmt.Sprintf("%s=%q", id, st))
		}
	}
	if len(states) != len(ids) {
		t.Errorf("the database holds %d executions, %d were created", len(states), len(ids))
	}
	if len(notCompleted) > 0 {
		t.Errorf("%d executions not completed (\"\": lost), e.g. %v", len(notCompleted), notCompleted[:min(5, len(notCompleted))])
	}
	if len(doubled) > 0 {
		t.Errorf("%d executions without exactly one completion, e.g. %v", len(doubled), doubled[:min(5, len(doubled))])
	}
	rep, err := audit.Postgres(ctx, pc.Pool(), audit.Options{})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	if !rep.OK() || rep.Checked != len(ids) || rep.Terminal != len(ids) {
		t.Errorf("audit: %s, want %d terminal; violations %v", rep.Summary(), len(ids), rep.Violations)
	}
}

// pgQueryMap runs a query of two text columns into a map.
func pgQueryMap(ctx context.Context, pc *postgres.Client, sql string) (map[string]string, error) {
	rows, err := pc.Pool().Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, rows.Err()
}

// describePGUnfinished logs the state of up to max executions of ids that
// are not terminal.
func describePGUnfinished(t *testing.T, pc *postgres.Client, ids []model.ExecutionID, max int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := pc.Pool().Query(ctx, `SELECT execution_id::text, lifecycle_phase, ownership_state, eligibility_state,
       COALESCE(blocking_reason, ''), attempt_state, attempt_index, lane_id, COALESCE(raw_fields->>'execution_kind', '')
  FROM ff_exec_core WHERE execution_id = ANY($1::uuid[]) AND lifecycle_phase <> 'terminal' LIMIT $2`, uuids(ids), max)
	if err != nil {
		t.Logf("describe unfinished: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, phase, own, elig, block, att, lane, kind string
		var idx int
		if err := rows.Scan(&id, &phase, &own, &elig, &block, &att, &idx, &lane, &kind); err != nil {
			t.Logf("describe unfinished: %v", err)
			return
		}
		t.Logf("unfinished %s: phase=%s ownership=%s eligibility=%s blocking=%s attempt_state=%s attempt=%d lane=%s kind=%s",
			id, phase, own, elig, block, att, idx, lane, kind)
	}
}
