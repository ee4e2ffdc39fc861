package postgres

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Group commit of completions.
//
// CompleteExecution does not run its statements alone: calls that arrive
// while a flush is in flight wait for it, and the next flush writes all of
// them together — per partition, one statement over arrays (lock the
// execution rows, lock the fenced attempts, complete every row whose
// fence holds: sqlCompleteMany), all partitions pipelined in one round
// trip, which Postgres runs as one implicit transaction. Each caller still gets its own
// outcome: the fence is checked per row from the locked rows, exactly as
// a lone CompleteExecution checks it (a stale fence in a batch is
// CodeStaleLease for that caller alone, the others complete). Nothing is
// fire-and-forget: a caller returns once its row is written (or refused),
// and Close waits for the flushes in flight.

// maxCompleteBatch bounds how many completions one flush writes.
const maxCompleteBatch = 256

// completeFlushTimeout bounds one flush: callers' contexts do not cancel
// a flush that carries other callers' completions.
const completeFlushTimeout = 30 * time.Second

// completeReq is one CompleteExecution waiting for a flush.
type completeReq struct {
	ctx  context.Context
	k    execKey
	p    *CompleteExecutionParams
	done chan error // buffered: the flusher never blocks on it
}

// completeGroup queues completions for the flusher goroutine. The zero
// value is ready.
type completeGroup struct {
	mu       sync.Mutex
	pending  []*completeReq
	flushing bool
	wg       sync.WaitGroup // the flusher in flight
}

// CompleteExecution ends the fenced attempt successfully, in a group
// commit with the completions that arrive while a flush is in flight (see
// above; one call alone is one round trip, as before).
//
//	ff_attempt: outcome success, terminal_at_ms now, lease_expires_at_ms NULL
//	ff_exec_core: terminal / unowned / not_applicable / completed / attempt_terminal,
//	  result, terminal_at_ms
//	ff_completion_event: success (namespace from raw_fields) → NOTIFY ff_completion
//	ff_lease_event: revoked
func (c *Client) CompleteExecution(ctx context.Context, p *CompleteExecutionParams) error {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return fmt.Errorf("complete execution %s: %w", p.ExecutionID, err)
	}
	r := &completeReq{ctx: ctx, k: k, p: p, done: make(chan error, 1)}
	g := &c.completes
	g.mu.Lock()
	g.pending = append(g.pending, r)
	if !g.flushing {
		g.flushing = true
		g.wg.Add(1)
		go c.flushCompletes()
	}
	g.mu.Unlock()
	select {
	case err = <-r.done:
	case <-ctx.Done():
		// The flush may still write it: as with any statement whose
		// caller gave up, the outcome is unknown to the caller.
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("complete execution %s: %w", p.ExecutionID, err)
	}
	return nil
}

// flushCompletes writes the queued completions, a batch at a time, until
// none is left.
func (c *Client) flushCompletes() {
	g := &c.completes
	defer g.wg.Done()
	for {
		g.mu.Lock()
		batch := takeCompleteBatch(&g.pending)
		if len(batch) == 0 {
			g.flushing = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		c.flushCompleteBatch(batch)
	}
}

// takeCompleteBatch removes up to maxCompleteBatch requests from the
// queue, at most one per execution (a second completion of the same
// execution waits for the next flush, where it sees the first's outcome);
// requests whose caller gave up are answered and dropped.
func takeCompleteBatch(pending *[]*completeReq) []*completeReq {
	var batch, rest []*completeReq
	seen := map[execKey]bool{}
	for _, r := range *pending {
		switch {
		case r.ctx.Err() != nil:
			r.done <- r.ctx.Err()
		case len(batch) >= maxCompleteBatch || seen[r.k]:
			rest = append(rest, r)
		default:
			seen[r.k] = true
			batch = append(batch, r)
		}
	}
	*pending = rest
	return batch
}

// flushCompleteBatch writes one batch and answers every request of it.
func (c *Client) flushCompleteBatch(batch []*completeReq) {
	ctx, cancel := context.WithTimeout(context.Background(), completeFlushTimeout)
	defer cancel()
	now := c.nowMs()
	byPart := map[int16][]*completeReq{}
	var parts []int16
	for _, r := range batch {
		if _, ok := byPart[r.k.part]; !ok {
			parts = append(parts, r.k.part)
		}
		byPart[r.k.part] = append(byPart[r.k.part], r)
	}
	// Rows are locked in (partition, execution id) order, exec_core before
	// ff_attempt as every fenced operation does, so two flushes never wait
	// on each other in a cycle.
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	b := &pgx.Batch{}
	// The batch runs under generic plans when every partition of it has
	// a literal text (hotplan.go); one without keeps parameter texts and
	// custom plans for the whole batch.
	texts := map[int16]string{}
	generic := true
	for _, pk := range parts {
		text, literal := c.hot.text(sqlCompleteMany, pk)
		generic = generic && literal
		texts[pk] = text
	}
	if generic {
		b.Queue(sqlGenericPlans)
	}
	for _, pk := range parts {
		rs := byPart[pk]
		sort.Slice(rs, func(i, j int) bool { return rs[i].k.id() < rs[j].k.id() })
		ids, idxs, epochs, results := make([]string, len(rs)), make([]int32, len(rs)), make([]int64, len(rs)), make([][]byte, len(rs))
		for i, r := range rs {
			ids[i], idxs[i], epochs[i], results[i] = r.k.id(), int32(r.p.Fence.AttemptIndex), int64(r.p.Fence.LeaseEpoch), r.p.Result
		}
		if generic {
			b.Queue(texts[pk], ids, idxs, epochs, now, results)
		} else {
			b.Queue(sqlCompleteMany.sql, ids, idxs, epochs, now, results, pk)
		}
	}
	outcome, err := c.runCompleteBatch(ctx, b, parts, byPart, now, generic)
	for _, r := range batch {
		if err != nil {
			r.done <- err
			continue
		}
		r.done <- outcome[r]
	}
}

// lockedCore and lockedAttempt are what the batch's statement locked and read
// of one execution and its fenced attempt.
type lockedCore struct {
	phase string
	idx   int
}

type lockedAttempt struct {
	epoch   int64
	expires *int64
}

// runCompleteBatch sends b and reads each request's outcome: nil when it
// completed, else the logical error a lone CompleteExecution reports
// (fenceError on the locked rows). err is a failure of the whole batch.
func (c *Client) runCompleteBatch(ctx context.Context, b *pgx.Batch, parts []int16, byPart map[int16][]*completeReq, now int64, generic bool) (map[*completeReq]error, error) {
	br := c.pool.SendBatch(ctx, b)
	var out map[*completeReq]error
	var err error
	if generic {
		out, err = readGenericBatch(br, func() (map[*completeReq]error, error) {
			return readCompleteBatch(br, parts, byPart, now)
		})
	} else {
		out, err = readCompleteBatch(br, parts, byPart, now)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return nil, notMigrated(err)
	}
	return out, nil
}

// readCompleteBatch reads the complete statement's rows of every
// partition of a group-commit batch: the locked execution rows, the
// locked fenced attempts and the completed ids, told apart by their
// first column.
func readCompleteBatch(br pgx.BatchResults, parts []int16, byPart map[int16][]*completeReq, now int64) (map[*completeReq]error, error) {
	out := map[*completeReq]error{}
	read := func(pk int16) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		cores, atts, done := map[string]lockedCore{}, map[string]lockedAttempt{}, map[string]bool{}
		for rows.Next() {
			var (
				kind  int16
				uuid  [16]byte
				phase *string
				idx   *int32
				epoch *int64
				la    lockedAttempt
			)
			if err := rows.Scan(&kind, &uuid, &phase, &idx, &epoch, &la.expires); err != nil {
				return err
			}
			id := execKey{part: pk, uuid: uuid}.id()
			switch kind {
			case completeRowCore:
				if phase == nil || idx == nil {
					return fmt.Errorf("complete: execution row %s without phase or attempt", id)
				}
				cores[id] = lockedCore{phase: *phase, idx: int(*idx)}
			case completeRowAttempt:
				if epoch == nil {
					return fmt.Errorf("complete: attempt row %s without lease epoch", id)
				}
				la.epoch = *epoch
				atts[id] = la
			case completeRowDone:
				done[id] = true
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range byPart[pk] {
			out[r] = completeOutcome(r, cores, atts, done, now)
		}
		return nil
	}
	for _, pk := range parts {
		if err := read(pk); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// completeOutcome is one request's outcome from its partition's locked
// rows and completed ids, checked as runFenced checks a lone call.
func completeOutcome(r *completeReq, cores map[string]lockedCore, atts map[string]lockedAttempt, done map[string]bool, now int64) error {
	id, f := r.k.id(), r.p.Fence
	lc, ok := cores[id]
	if !ok {
		return CodeExecutionNotFound
	}
	la, ok := atts[id]
	if !ok {
		return fmt.Errorf("%w: no attempt %d", CodeStaleLease, f.AttemptIndex)
	}
	if err := fenceError(f, lc.phase, lc.idx, la.epoch, la.expires, now); err != nil {
		return err
	}
	if !done[id] {
		return fmt.Errorf("%w: fence held but nothing changed", CodeExecutionNotActive)
	}
	return nil
}

// waitCompletes waits for the completion flush in flight (Close).
func (c *Client) waitCompletes() { c.completes.wg.Wait() }

// The kinds of row sqlCompleteMany returns (its first column).
const (
	completeRowCore    = 0 // a locked execution: phase, attempt index
	completeRowAttempt = 1 // a locked fenced attempt: lease epoch, expiry
	completeRowDone    = 2 // a completed execution
)

// sqlCompleteMany is the group commit of one partition's completions, in
// one statement: the executions $1 (uuid text), their fenced attempt
// indexes $2, lease epochs $3 (same order) and results $5, at now $4, on
// partition $6, the last parameter (hotplan.go writes it as a literal).
//
// It locks the execution rows in id order (lc), then the fenced attempts
// in id order (la: its one-time filter on lc runs lc to the end first,
// so rows are locked exec_core before ff_attempt as every fenced
// operation locks them); completes every row whose fence (attempt,
// epoch, lease unexpired at $4) holds on the locked rows, with its result,
// its completion event and its revoked lease event; and returns the
// locked rows and the completed ids, each row tagged by its kind
// (completeRow*), from which each caller's outcome is read as a lone
// CompleteExecution reads it. Until 2026-12-02 the two locks were
// statements of their own in the same pipeline.
var sqlCompleteMany = newHotStmt(`
WITH f AS (
  SELECT * FROM unnest($1::uuid[], $2::int[], $3::bigint[], $5::bytea[]) AS f(execution_id, attempt_index, lease_epoch, result)),
lc AS MATERIALIZED (
  SELECT execution_id, lifecycle_phase, attempt_index FROM ff_exec_core
   WHERE partition_key = $6::smallint AND execution_id = ANY($1::uuid[])
   ORDER BY execution_id FOR UPDATE),
la AS MATERIALIZED (
  SELECT a.execution_id, a.attempt_index, a.lease_epoch, a.lease_expires_at_ms
    FROM ff_attempt a
    JOIN f ON a.execution_id = f.execution_id AND a.attempt_index = f.attempt_index
   WHERE a.partition_key = $6::smallint AND a.execution_id = ANY($1::uuid[])
     AND (SELECT count(*) FROM lc) >= 0
   ORDER BY a.execution_id FOR UPDATE OF a),
core AS (
  UPDATE ff_exec_core c
     SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
         public_state = 'completed', attempt_state = 'attempt_terminal', terminal_at_ms = $4, result = f.result,
         raw_fields = c.raw_fields || jsonb_build_object('last_mutation_at', $4::bigint::text, 'terminal_outcome', 'success')
    FROM f, la
   WHERE c.partition_key = $6::smallint AND c.execution_id = ANY($1::uuid[]) AND c.lifecycle_phase = 'active'
     AND c.execution_id = f.execution_id AND c.attempt_index = f.attempt_index
     AND la.execution_id = c.execution_id AND la.attempt_index = c.attempt_index
     AND la.lease_epoch = f.lease_epoch AND la.lease_expires_at_ms > $4
  RETURNING c.partition_key, c.execution_id, c.attempt_index, c.flow_id, c.raw_fields),
att AS (
  UPDATE ff_attempt a SET terminal_at_ms = $4, outcome = 'success', lease_expires_at_ms = NULL
    FROM core
   WHERE a.partition_key = $6::smallint AND a.execution_id = ANY($1::uuid[])
     AND a.execution_id = core.execution_id AND a.attempt_index = core.attempt_index),
done AS (
  INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
  SELECT partition_key, execution_id, flow_id, 'success', raw_fields->>'namespace', raw_fields->>'instance_tag', $4
    FROM core),
ev AS (
  INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
  SELECT execution_id::text, NULL, 'revoked', $4, partition_key::int, raw_fields->>'namespace',
         raw_fields->'tags'->>'cairn.instance_id'
    FROM core
  RETURNING event_id),
note AS (
  INSERT INTO fabric_lease_reason (event_id, reason) SELECT event_id, 'completed' FROM ev)
SELECT 0::smallint, execution_id, lifecycle_phase, attempt_index, NULL::bigint, NULL::bigint FROM lc
UNION ALL
SELECT 1::smallint, execution_id, NULL, attempt_index, lease_epoch, lease_expires_at_ms FROM la
UNION ALL
SELECT 2::smallint, execution_id, NULL, NULL, NULL, NULL FROM core`, 6, "ff_exec_core", "ff_attempt")
