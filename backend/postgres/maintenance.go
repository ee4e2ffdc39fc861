package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
)

// BudgetResetBatchDefault is the candidate limit of one budget-reset pass
// when the caller passes 0 (upstream's BATCH_SIZE for budget_reset).
const BudgetResetBatchDefault = 20

// scanIDs runs an autocommit candidate query whose first column is text.
func (c *Client) scanIDs(ctx context.Context, sql string, args ...any) ([]string, error) {
	rows, err := c.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, notMigrated(err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var s string
		err := r.Scan(&s)
		return s, err
	})
}

// partitionCandidates reads the candidates of one partition with scan
// (its arguments: partition key, now, limit; limit 0 means def). The
// error of a scan is wrapped with what ("reset budgets on partition 3").
func (c *Client) partitionCandidates(ctx context.Context, what string, partition uint16, now int64, limit, def int, scan string) (int16, []string, error) {
	pk, err := partitionKey(partition)
	if err != nil {
		return 0, nil, err
	}
	if limit <= 0 {
		limit = def
	}
	cands, err := c.scanIDs(ctx, scan, pk, now, limit)
	if err != nil {
		return 0, nil, fmt.Errorf("%s on partition %d: %w", what, partition, err)
	}
	return pk, cands, nil
}

// eachCandidate runs one transaction per candidate, counting the outcomes.
func (c *Client) eachCandidate(ctx context.Context, what string, cands []string, fn func(tx pgx.Tx, id string) (bool, error)) (*ScanResult, error) {
	res := &ScanResult{Scanned: len(cands)}
	for _, id := range cands {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var acted bool
		err := c.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			acted, err = fn(tx, id)
			return err
		})
		if err != nil {
			c.log.Warn(what+": candidate failed", "id", id, "error", err)
		}
		res.add(acted, err)
	}
	return res, nil
}

// ResetBudgetsDue resets the budgets of one budget partition whose reset
// time (next_reset_at_ms) has come, the most overdue first, at most limit
// (0: 20) per call: upstream's budget_reset reconciler. Each budget is
// reset in its own transaction that re-checks it under its row lock:
//
//	ff_budget_policy: last_breach_at_ms / last_breach_dim NULL, updated_at_ms now,
//	  next_reset_at_ms now + policy_json.reset_interval_ms (NULL when 0)
//	ff_budget_usage: every dimension current_value 0, last_reset_at_ms now
//
// breach_count and soft_breach_count are kept, as upstream keeps them.
func (c *Client) ResetBudgetsDue(ctx context.Context, budgetPartition uint16, now int64, limit int) (*ScanResult, error) {
	pk, cands, err := c.partitionCandidates(ctx, "reset budgets", budgetPartition, now, limit, BudgetResetBatchDefault, pgsql.BudgetResetScan.SQL)
	if err != nil {
		return nil, err
	}
	return c.eachCandidate(ctx, "budget reset", cands, func(tx pgx.Tx, id string) (bool, error) {
		var next *int64
		err := tx.QueryRow(ctx, pgsql.BudgetResetPolicy.SQL, pk, id, now).Scan(&next)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, err = tx.Exec(ctx, pgsql.BudgetResetUsage.SQL, pk, id, now)
		return err == nil, err
	})
}

// ExpireExecutionDeadlines ends the executions of one partition whose
// execution deadline passed before now, the most overdue first, at most
// limit (0: 1000) per call: upstream's execution_deadline hook, which
// upstream never drives on Postgres, as a reconciler, and, as on Valkey,
// for suspended and runnable executions too. Each in its own transaction
// that re-reads the execution under lock:
//
//	active: ff_attempt outcome interrupted, lease cleared; ff_lease_event expired
//	suspended: ff_suspension_current row deleted
//	ff_exec_core terminal / expired, failure_reason execution_deadline;
//	  ff_completion_event 'expired' (NOTIFY ff_completion)
func (c *Client) ExpireExecutionDeadlines(ctx context.Context, partition uint16, now int64, limit int) (*ScanResult, error) {
	pk, cands, err := c.partitionCandidates(ctx, "expire execution deadlines", partition, now, limit, ReconcileBatchDefault, pgsql.ExecDeadlineScan.SQL)
	if err != nil {
		return nil, err
	}
	return c.eachCandidate(ctx, "execution deadline", cands, func(tx pgx.Tx, id string) (bool, error) {
		u, err := model.ParseUUID(id)
		if err != nil {
			return false, err
		}
		k := execKey{part: pk, uuid: u}
		var idx int
		var phase, elig string
		var deadline *int64
		err = tx.QueryRow(ctx, pgsql.ExecDeadlineLock.SQL, pk, id).Scan(&idx, &phase, &elig, &deadline)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil || !pgsql.DeadlineExpires(phase, elig, deadline != nil, deref(deadline), now) {
			return false, err
		}
		if phase == model.PhaseActive {
			if _, err := tx.Exec(ctx, pgsql.AttemptInterrupt.SQL, pk, id, idx, now); err != nil {
				return false, err
			}
		}
		if phase == model.PhaseSuspended {
			if _, err := tx.Exec(ctx, pgsql.SuspensionDelete.SQL, pk, id); err != nil {
				return false, err
			}
		}
		if _, err := tx.Exec(ctx, pgsql.ExecCoreExpireDeadline.SQL, pk, id, now); err != nil {
			return false, err
		}
		if _, err := emitCompletion(ctx, tx, k, model.OutcomeExpired, now, false); err != nil {
			return false, err
		}
		if phase == model.PhaseActive {
			if err := emitLeaseEvent(ctx, tx, k, LeaseEventExpired, "", now); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// ExpirePendingWaitpoints closes the pending waitpoints of one partition
// that expired before now, oldest first, at most limit (0: 1000) per call:
// upstream's pending_wp_expiry hook, never driven on Postgres upstream, as
// a reconciler. Only waitpoints still pending (never committed to a
// suspension) expire; each in its own transaction:
//
//	ff_waitpoint_pending: row deleted (re-checked under its lock)
//	ff_suspension_current.member_map[waitpoint key, or id when the key is empty] =
//	  {status: never_committed, closed_at_ms: now, source: pending_wp_expiry}
//	  when the execution has a suspension
func (c *Client) ExpirePendingWaitpoints(ctx context.Context, partition uint16, now int64, limit int) (*ScanResult, error) {
	pk, cands, err := c.partitionCandidates(ctx, "expire pending waitpoints", partition, now, limit, ReconcileBatchDefault, pgsql.WaitpointExpiryScan.SQL)
	if err != nil {
		return nil, err
	}
	return c.eachCandidate(ctx, "pending waitpoint expiry", cands, func(tx pgx.Tx, id string) (bool, error) {
		var eid, member string
		err := tx.QueryRow(ctx, pgsql.WaitpointExpireDelete.SQL, pk, id, now).Scan(&eid, &member)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, err = tx.Exec(ctx, pgsql.SuspensionMarkNeverCommitted.SQL, pk, eid, member, now)
		return err == nil, err
	})
}

// ProjectFlowSummaries projects the flow summaries (ff_flow_summary) of
// one partition's flows that have members, those never projected first,
// then the least recently projected, at most limit (0: 1000) per call:
// upstream's project_flow_summary, which nothing drives on Postgres, as a
// reconciler. A flow's summary counts every member by public_state and
// derives failed / completed / running / blocked / open as Valkey's flow
// projector does; ff_flow_core.public_flow_state is never written.
func (c *Client) ProjectFlowSummaries(ctx context.Context, partition uint16, now int64, limit int) (*ScanResult, error) {
	pk, cands, err := c.partitionCandidates(ctx, "project flow summaries", partition, now, limit, ReconcileBatchDefault, pgsql.FlowSummaryScan.SQL)
	if err != nil {
		return nil, err
	}
	return c.eachCandidate(ctx, "flow summary", cands, func(tx pgx.Tx, id string) (bool, error) {
		var state string
		err := tx.QueryRow(ctx, pgsql.FlowSummaryProject.SQL, pk, id, now).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
