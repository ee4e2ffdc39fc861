package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fabric-host/fabric/model"
)

// pgNonTerminal reads every non-terminal execution with its current
// attempt's lease, and the server's clock. On Postgres a delayed
// execution's wake time is deadline_at_ms, and an expired lease makes the
// execution runnable again (pg_lease_expiry), so there is no
// awaiting-reclaim state.
const pgNonTerminal = `SELECT c.execution_id::text, c.lane_id, c.lifecycle_phase, c.ownership_state, c.eligibility_state,
       coalesce(c.blocking_reason, ''), coalesce(c.deadline_at_ms, 0), c.flow_id IS NOT NULL,
       coalesce(a.worker_instance_id, ''), coalesce(a.lease_expires_at_ms, 0)
  FROM ff_exec_core c
  LEFT JOIN ff_attempt a ON a.partition_key = c.partition_key AND a.execution_id = c.execution_id
                        AND a.attempt_index = c.attempt_index
 WHERE c.lifecycle_phase <> 'terminal'`

// Postgres checks every execution of a migrated fabric database: one
// count of the terminal ones and one scan of the rest, in one read-only
// snapshot.
func Postgres(ctx context.Context, pool *pgxpool.Pool, o Options) (*Report, error) {
	o = o.withDefaults()
	// Both reads see one snapshot: read one after the other, an execution
	// that ended between them was in neither (counted non-terminal by the
	// count, terminal by the scan), and the audit reported one execution
	// fewer than the database held.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("audit: begin read: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var nowMs int64
	var terminal int
	countTerminal := `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
       (SELECT count(*) FROM ff_exec_core WHERE lifecycle_phase = 'terminal')`
	if o.Only != nil {
		countTerminal = `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 0`
	}
	if err := tx.QueryRow(ctx, countTerminal).Scan(&nowMs, &terminal); err != nil {
		return nil, fmt.Errorf("audit: count terminal executions: %w", err)
	}
	rep := &Report{At: time.UnixMilli(nowMs), Checked: terminal, Terminal: terminal}
	// Postgres stores the id's uuid alone (the partition is a column).
	var only map[string]bool
	if o.Only != nil {
		only = make(map[string]bool, len(o.Only))
		for id := range o.Only {
			only[model.ExecutionID(id).UUIDString()] = true
		}
	}
	if betweenReads != nil {
		betweenReads()
	}
	rows, err := tx.Query(ctx, pgNonTerminal)
	if err != nil {
		return nil, fmt.Errorf("audit: read executions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r record
		if err := rows.Scan(&r.id, &r.lane, &r.phase, &r.own, &r.elig, &r.reason, &r.dueAt, &r.inFlow,
			&r.worker, &r.leaseExp); err != nil {
			return nil, fmt.Errorf("audit: read executions: %w", err)
		}
		if only != nil && !only[r.id] {
			continue
		}
		rep.Checked++
		classify(o, rep, r, nowMs, postgresScanners)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: read executions: %w", err)
	}
	return rep, nil
}
