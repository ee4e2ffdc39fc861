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
// sent in a pipeline that switches the connection to plan_cache_mode =
// auto for it and back:
//
//	SET plan_cache_mode = auto; <statement>; RESET plan_cache_mode
//
// one round trip and one implicit transaction (an error rolls the SET
// back with it). After five custom plans Postgres keeps the statement's
// generic plan when it costs no more, and the statement is no longer
// planned at all (measured on the claim: planning 0.4–0.6 ms → 0.02 ms,
// execution unchanged). Every (statement, partition) is its own prepared
// statement on every connection, so only the first hotPartitionCap
// partitions a Client sees get literal texts; the others keep the
// parameter form and custom plans. A worker's lanes live on their solo
// partitions, which are the ones a busy client meets first.

// hotPartitionCap bounds the partitions a Client writes literal
// statement texts for.
const hotPartitionCap = 16

// The pipeline around a literal-partition statement.
const (
	sqlGenericPlans = `SET plan_cache_mode = auto`
	sqlResetPlans   = `RESET plan_cache_mode`
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

// readGenericBatch reads a batch sent as sqlGenericPlans, the hot
// statements, sqlResetPlans: read reads the statements' results (it may
// report CodeNoEligibleExecution, which is not a failure of the batch).
// Every result is read and the batch closed — its implicit transaction
// committed — before the outcome is returned.
func readGenericBatch[T any](br pgx.BatchResults, read func() (T, error)) (T, error) {
	var out T
	_, err := br.Exec()
	if err == nil {
		if out, err = read(); errors.Is(err, CodeNoEligibleExecution) {
			err = nil
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return out, err
}
