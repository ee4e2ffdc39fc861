package postgres

import (
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
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
// The statements of the hot path — a worker's claim on one partition
// (sqlGrantNext) and the group completion of one partition's executions
// (sqlLockCoreMany, sqlLockAttemptMany, sqlCompleteMany) — have a second
// form: the partition written into the text as a literal, so that
// planning prunes to its children whatever the plan, and the statement is
// sent in a pipeline that first switches the connection to
// plan_cache_mode = auto for its implicit transaction alone:
//
//	SELECT set_config('plan_cache_mode', 'auto', true); <statement>
//
// one round trip and one implicit transaction, whose end (commit or
// rollback) restores force_custom_plan: no RESET statement follows. After
// five custom plans Postgres keeps the statement's generic plan when it
// costs no more, and the statement is no longer planned at all (measured
// on the claim: planning 0.4–0.6 ms → 0.02 ms, execution unchanged).
// Every (statement, partition) is its own prepared statement on every
// connection, so only the first hotPartitionCap partitions a Client sees
// get literal texts; the others keep the parameter form and custom plans.
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

// hotPartitionCap bounds the partitions a Client writes literal
// statement texts for.
const hotPartitionCap = 16

// The statements that open the pipeline of a hot statement, each setting
// its implicit transaction alone (set_config with is_local): the generic
// plans of a literal-partition statement; a claim's plans without sorts,
// with generic plans (literal partition) or under the connection's mode
// (parameter form); and a create's generic plans with its eligible
// NOTIFY quieted (eligible_notes.go).
const (
	sqlGenericPlans        = `SELECT set_config('plan_cache_mode', 'auto', true)`
	sqlClaimPlans          = `SELECT set_config('plan_cache_mode', 'auto', true), set_config('enable_sort', 'off', true)`
	sqlClaimPlansNoGeneric = `SELECT set_config('enable_sort', 'off', true)`
	sqlGenericPlansQuiet   = `SELECT set_config('plan_cache_mode', 'auto', true), set_config('fabric.eligible_notify', 'off', true)`
)

// hotStmt is a hot-path statement whose last parameter, $N::smallint, is
// the partition.
type hotStmt struct {
	sql  string
	last int // N
}

// newHotStmt returns the statement whose partition parameter is $last.
func newHotStmt(sql string, last int) *hotStmt {
	return &hotStmt{sql: sql, last: last}
}

// hotPlans holds a Client's literal-partition texts.
type hotPlans struct {
	// off: the connection URL sets plan_cache_mode, which is then left
	// alone (every statement in its parameter form).
	off   bool
	mu    sync.Mutex
	parts map[int16]bool
	texts map[hotKey]string
}

type hotKey struct {
	s    *hotStmt
	part int16
}

// text returns the statement for partition part: the literal form and
// true while part is among the partitions given literal texts, else the
// parameter form and false (the caller then passes part as the last
// argument).
func (h *hotPlans) text(s *hotStmt, part int16) (string, bool) {
	if h.off {
		return s.sql, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.parts[part] {
		if len(h.parts) >= hotPartitionCap {
			return s.sql, false
		}
		if h.parts == nil {
			h.parts, h.texts = map[int16]bool{}, map[hotKey]string{}
		}
		h.parts[part] = true
	}
	k := hotKey{s, part}
	t, ok := h.texts[k]
	if !ok {
		t = strings.ReplaceAll(s.sql, "$"+strconv.Itoa(s.last)+"::smallint", strconv.Itoa(int(part))+"::smallint")
		h.texts[k] = t
	}
	return t, true
}

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
