package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/singleflight"
)

// Generic plans for the hot path.
//
// A Client's connections run with plan_cache_mode = force_custom_plan
// (client.go): a generic plan of a statement over the 256-way
// partitioned tables prunes only at run time, and Postgres 15 locks every
// partition it names on each execution. The price is planning every
// execution, which measured about half of the Postgres time of a claim
// and of a group completion.
//
// The statements of the hot path — a create (sqlCreate), a worker's
// claim on one partition (sqlGrantNext) and the group completion of one
// partition's executions (sqlCompleteMany) — have a second form: the
// partition written into the text as a literal, so that planning prunes
// to its children whatever the plan (a create keeps its partition as a
// parameter: an INSERT prunes nothing), and the statement is sent in a
// pipeline that first switches the connection to plan_cache_mode =
// force_generic_plan for its implicit transaction alone:
//
//	SELECT set_config('plan_cache_mode', 'force_generic_plan', true); <statement>
//
// one round trip and one implicit transaction, whose end (commit or
// rollback) restores force_custom_plan: no RESET statement follows. The
// first execution on a connection makes the generic plan, which the
// connection keeps until an ANALYZE or a schema change invalidates it:
// the statement is no longer planned (measured on the claim: planning
// 0.4–0.6 ms → 0.02 ms, execution unchanged). Until 2026-12-02 the mode
// was auto, which plans five custom plans per connection before it
// settles on the generic one, and five more after every invalidation:
// on a fresh database (the claimer's first ANALYZE invalidates every
// plan) that was 40–50 plans of the group completion per 6,000
// executions over six connections, 5–8 ms each on a connection's cold
// catalog caches, and as many of the claim — about 100 µs of planning
// per execution.
// Every (statement, partition) is its own prepared statement on every
// connection, so only the first hotPartitionCap partitions a Client sees
// for a statement get its literal text; the others keep the parameter
// form and custom plans.
// A worker's lanes live on their solo partitions, which are the ones a
// busy client meets first.
//
// A claim also turns enable_sort off for its transaction (sqlClaimPlans):
// the claim index is partial and ordered as the claim reads it, but a
// fresh partition's statistics say it is empty until autovacuum analyzes
// it — on a database with several others that can take longer than a
// whole burst of work — and under those statistics the planner prefers
// FlowFabric's (partition, lane, phase) index and a sort of every
// runnable row of the lane. That plan cost 6–20 ms per claim with a
// backlog of 300–1,500 executions (0.1–0.5 ms with the claim index), and
// a generic plan made under it is kept until the next analyze: measured
// at W=8 in runs of 6,000 executions, 356–747/s with sorts allowed
// against 989–1,339/s without, alternating runs.

// hotPartitionCap bounds the partitions a Client writes literal texts
// of one statement for.
const hotPartitionCap = 16

// The statements that open the pipeline of a hot statement, each setting
// its implicit transaction alone (set_config with is_local): the generic
// plans of a literal-partition statement; a claim's plans without sorts,
// with generic plans (literal partition) or under the connection's mode
// (parameter form); and a create's generic plans with its eligible
// NOTIFY quieted (eligible_notes.go).
const (
	sqlGenericPlans        = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`
	sqlClaimPlans          = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_sort', 'off', true)`
	sqlClaimPlansNoGeneric = `SELECT set_config('enable_sort', 'off', true)`
	sqlGenericPlansQuiet   = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('fabric.eligible_notify', 'off', true)`
)

// hotStmt is a hot-path statement whose last parameter, $N::smallint, is
// the partition (N = 0: the partition stays a parameter), and which reads
// and writes the partitioned tables tables.
type hotStmt struct {
	sql    string
	last   int // N
	tables []string
	names  []*regexp.Regexp // tableName of each of tables
}

// newHotStmt returns the statement whose partition parameter is $last
// (0: none is written as a literal) and which names the partitioned
// tables tables (each where it names a table: an ON CONFLICT clause names
// the row by an alias).
func newHotStmt(sql string, last int, tables ...string) *hotStmt {
	s := &hotStmt{sql: sql, last: last, tables: tables}
	for _, t := range tables {
		name := tableName(t)
		if !name.MatchString(sql) {
			panic("postgres: hot statement names no " + t)
		}
		s.names = append(s.names, name)
	}
	return s
}

// tableName matches table t named as a whole word (not ff_exec_core in
// ff_exec_core_p7).
func tableName(t string) *regexp.Regexp { return regexp.MustCompile(`\b` + t + `\b`) }

// hotPlans holds a Client's literal-partition texts.
type hotPlans struct {
	// off: the connection URL sets plan_cache_mode, which is then left
	// alone (every statement in its parameter form).
	off bool
	// child resolves the hash partition that holds a partition key
	// (Client.childOf); nil: the literal texts name the partitioned
	// tables.
	child func(part int16) (remainder int, ok bool, err error)
	// resolving makes one child call per partition at a time; kids keeps
	// its answer (the remainder, -1 for none) for every statement.
	resolving singleflight.Group
	mu        sync.Mutex
	parts     map[*hotStmt]map[int16]bool
	texts     map[hotKey]string
	kids      map[int16]int
}

// childOf is child, asked once per partition (an error is not kept).
func (h *hotPlans) childOf(part int16) (int, bool, error) {
	h.mu.Lock()
	r, known := h.kids[part]
	h.mu.Unlock()
	if !known {
		v, err, _ := h.resolving.Do(strconv.Itoa(int(part)), func() (any, error) {
			r, ok, err := h.child(part)
			if err != nil {
				return nil, err
			}
			if !ok {
				r = -1
			}
			h.mu.Lock()
			if h.kids == nil {
				h.kids = map[int16]int{}
			}
			h.kids[part] = r
			h.mu.Unlock()
			return r, nil
		})
		if err != nil {
			return 0, false, err
		}
		r = v.(int)
	}
	return r, r >= 0, nil
}

type hotKey struct {
	s    *hotStmt
	part int16
}

// text returns the statement for partition part: the literal form and
// true while part is among the partitions given literal texts of s, else
// the parameter form and false (the caller then passes part as the last
// argument, if s has one).
//
// The literal form also names the partition's own child of each table
// of s.tables (FlowFabric's schema names them <table>_p<remainder>)
// instead of the table: an INSERT through the partitioned table routes
// every row, and with ON CONFLICT looks up each index's ancestors in the
// catalog per statement — measured, a create through ff_exec_core cost
// 305–397 µs of server CPU under four producers against 255–273 µs into
// its child; and a statement that names the partitioned table makes a
// connection read the bounds of all 256 children at its first plan
// (12–27 ms per hot statement per connection, measured on fresh
// connections). Where the child cannot be resolved (another layout), the
// text keeps the table.
func (h *hotPlans) text(s *hotStmt, part int16) (string, bool) {
	if h.off {
		return s.sql, false
	}
	k := hotKey{s, part}
	h.mu.Lock()
	if t, ok := h.texts[k]; ok {
		h.mu.Unlock()
		return t, true
	}
	if h.parts == nil {
		h.parts, h.texts = map[*hotStmt]map[int16]bool{}, map[hotKey]string{}
	}
	if !h.parts[s][part] && len(h.parts[s]) >= hotPartitionCap {
		h.mu.Unlock()
		return s.sql, false
	}
	h.mu.Unlock()
	t := s.sql
	if s.last > 0 {
		t = strings.ReplaceAll(t, "$"+strconv.Itoa(s.last)+"::smallint", strconv.Itoa(int(part))+"::smallint")
	}
	keep := true
	if len(s.tables) > 0 && h.child != nil {
		r, ok, err := h.childOf(part)
		switch {
		case err != nil:
			keep = false // resolved again next time; this text names the tables
		case ok:
			for i, table := range s.tables {
				t = s.names[i].ReplaceAllLiteralString(t, table+"_p"+strconv.Itoa(r))
			}
		}
	}
	if keep {
		h.mu.Lock()
		if h.parts[s] == nil {
			h.parts[s] = map[int16]bool{}
		}
		if len(h.parts[s]) < hotPartitionCap || h.parts[s][part] {
			h.parts[s][part] = true
			h.texts[k] = t
		}
		h.mu.Unlock()
	}
	return t, true
}

// sqlChildOf finds the hash partition r that holds partition key $1 in
// ff_exec_core, and checks that each table of $2 has its child for r
// named <table>_p<r> (FlowFabric's migration), which fills every column
// the table fills by default or identity: no row when one has not.
const sqlChildOf = `SELECT r FROM generate_series(0, 255) AS r
 WHERE satisfies_hash_partition('ff_exec_core'::regclass, 256, r, $1::smallint)
   AND (SELECT count(*) FROM unnest($2::text[]) AS t
          JOIN pg_class c ON c.oid = to_regclass(t || '_p' || r)
          JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = to_regclass(t)
         WHERE pg_get_expr(c.relpartbound, c.oid) = 'FOR VALUES WITH (modulus 256, remainder ' || r || ')'
           AND NOT EXISTS (
                 SELECT 1 FROM pg_attribute pa
                  WHERE pa.attrelid = i.inhparent AND pa.attnum > 0 AND NOT pa.attisdropped
                    AND (pa.atthasdef OR pa.attidentity <> '')
                    AND NOT EXISTS (SELECT 1 FROM pg_attribute ca
                                     WHERE ca.attrelid = c.oid AND ca.attname = pa.attname
                                       AND (ca.atthasdef OR ca.attidentity <> '')))
       ) = cardinality($2::text[])`

// hotTables are the partitioned tables hot statements name by their
// children. Not ff_completion_event: its event_id is an
// identity column of the partitioned table alone, which a row written
// into a child would leave NULL.
var hotTables = []string{"ff_exec_core", "ff_attempt"}

// childOf resolves the child of the hot tables that holds partition key
// part (hotPlans.child): ok false when the schema's partitions are laid
// out otherwise than FlowFabric's migration lays them out.
func (c *Client) childOf(part int16) (int, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), childOfTimeout)
	defer cancel()
	var r int
	err := c.pool.QueryRow(ctx, sqlChildOf, part, hotTables).Scan(&r)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		c.log.Debug("postgres: hot statements name the partitioned tables", "partition", part)
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("resolve the child of partition %d: %w", part, err)
	}
	return r, true, nil
}

// childOfTimeout bounds childOf's one query.
const childOfTimeout = 5 * time.Second

// readGenericBatch reads a batch sent as one of the set_config
// statements above, then the hot statements: read reads the statements'
// results (it may report CodeNoEligibleExecution, which is not a failure
// of the batch). Every result is read and the batch closed — its implicit
// transaction committed — before the outcome is returned.
func readGenericBatch[T any](br pgx.BatchResults, read func() (T, error)) (T, error) {
	var out T
	_, err := br.Exec()
	if err == nil {
		if out, err = read(); errors.Is(err, CodeNoEligibleExecution) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return out, err
}
