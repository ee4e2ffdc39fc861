package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/model/pgsql"
)

// ReconcileBatchDefault is the candidate limit of one reconciler pass when
// the caller passes 0 (upstream's BATCH_SIZE for the timeout reconcilers).
const ReconcileBatchDefault = 1000

// ScanResult counts what one reconciler pass over one partition did.
type ScanResult struct {
	// Scanned is the number of candidates the selecting query returned.
	Scanned int
	// Acted counts candidates whose state this pass changed.
	Acted int
	// Skipped counts candidates that no longer qualified when re-read under
	// lock (a concurrent writer got there first). Upstream counts these as
	// processed.
	Skipped int
	// Errors counts candidates whose transaction failed (rolled back; the
	// pass goes on with the next candidate).
	Errors int
}

func (r *ScanResult) add(acted bool, err error) {
	switch {
	case err != nil:
		r.Errors++
	case acted:
		r.Acted++
	default:
		r.Skipped++
	}
}

func partitionKey(partition uint16) (int16, error) {
	if partition > 32767 {
		return 0, fmt.Errorf("%w: partition %d out of range", CodeInvalidInput, partition)
	}
	return int16(partition), nil
}

// scanCandidates runs an autocommit candidate query of partition pk whose
// first column is the execution id as text (the model/pgsql scans).
func (c *Client) scanCandidates(ctx context.Context, pk int16, sql string, args ...any) ([]execKey, error) {
	rows, err := c.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, notMigrated(err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (execKey, error) {
		vals, err := r.Values()
		if err != nil {
			return execKey{}, err
		}
		s, _ := vals[0].(string)
		u, err := model.ParseUUID(s)
		return execKey{part: pk, uuid: u}, err
	})
}

// ReconcileAttemptTimeouts expires the current attempts of one partition
// whose own deadline (pgsql.AttemptDeadlineField: the claim's now +
// timeout_policy.attempt_timeout_ms) passed before now, earliest first, at
// most limit (0: 1000) per call: the attempt-timeout reconciler of
// upstream as a plain function. Upstream took an expired lease for a
// timed-out attempt; fabric leaves a lease's expiry to the lease-expiry
// reconciler, which makes the execution reclaimable, as Valkey does.
//
// Candidates come from an unlocked scan (ff_attempt joined with an active
// ff_exec_core on its current attempt, deadline < now); each is then
// handled in its own transaction that re-reads both rows FOR UPDATE and
// re-checks them, so a candidate completed meanwhile is skipped. Per
// candidate:
//
//	ff_attempt: outcome interrupted, lease_expires_at_ms NULL, terminal_at_ms now
//	retries left (attempt_index < policy.retry_policy.max_retries):
//	  ff_exec_core runnable / unowned / eligible_now / waiting / pending_retry_attempt,
//	  attempt_index+1, raw_fields.last_failure_message 'attempt_timeout'
//	exhausted:
//	  ff_exec_core terminal / unowned / not_applicable / expired / attempt_terminal,
//	  terminal_at_ms now; ff_completion_event 'expired' (NOTIFY ff_completion)
//	ff_lease_event: expired
//
// Upstream leaves public_state untouched here (spec §9 item 2); fabric sets
// waiting / expired so readers of public_state see the transition.
func (c *Client) ReconcileAttemptTimeouts(ctx context.Context, partition uint16, now int64, limit int) (*ScanResult, error) {
	pk, err := partitionKey(partition)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = ReconcileBatchDefault
	}
	cands, err := c.scanCandidates(ctx, pk, pgsql.AttemptTimeoutScan.SQL, pk, now, limit)
	if err != nil {
		return nil, fmt.Errorf("reconcile attempt timeouts on partition %d: %w", partition, err)
	}
	res := &ScanResult{Scanned: len(cands)}
	for _, k := range cands {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		acted, err := c.expireAttempt(ctx, k, now)
		if err != nil {
			c.log.Warn("attempt timeout: expire failed", "execution_id", string(k.execID()), "error", err)
		}
		res.add(acted, err)
	}
	return res, nil
}

// ExpireAttemptTimeoutParams are the inputs of ExpireAttemptTimeout.
type ExpireAttemptTimeoutParams struct {
	ExecutionID model.ExecutionID
	// NowMs is the reconciler's clock.
	NowMs int64
}

// ExpireAttemptTimeout is ReconcileAttemptTimeouts for one execution; it
// reports whether the execution's state changed.
func (c *Client) ExpireAttemptTimeout(ctx context.Context, p *ExpireAttemptTimeoutParams) (bool, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return false, fmt.Errorf("expire attempt timeout %s: %w", p.ExecutionID, err)
	}
	acted, err := c.expireAttempt(ctx, k, p.NowMs)
	if err != nil {
		return false, fmt.Errorf("expire attempt timeout %s: %w", p.ExecutionID, err)
	}
	return acted, nil
}

// expireAttempt is the per-row transaction of the attempt-timeout
// reconciler, in the statements of model/pgsql that the pg_attempt_timeout
// plugin runs too.
func (c *Client) expireAttempt(ctx context.Context, k execKey, now int64) (bool, error) {
	acted := false
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		var idx, maxRetries int
		var phase string
		// Lock order exec_core, then attempt: the worker operations take
		// the same order, so the two never deadlock.
		err := tx.QueryRow(ctx, pgsql.ExecCoreLock.SQL, k.part, k.id()).Scan(&idx, &phase, &maxRetries)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if phase != model.PhaseActive {
			return nil
		}
		var deadline *int64
		err = tx.QueryRow(ctx, pgsql.AttemptLockDeadline.SQL, k.part, k.id(), idx).Scan(&deadline)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if deadline == nil || *deadline >= now {
			return nil
		}
		if _, err := tx.Exec(ctx, pgsql.AttemptInterrupt.SQL, k.part, k.id(), idx, now); err != nil {
			return err
		}
		if idx < maxRetries {
			if _, err := tx.Exec(ctx, pgsql.ExecCoreRetryAfterTimeout.SQL, k.part, k.id(), now); err != nil {
				return err
			}
		} else {
			if _, err := tx.Exec(ctx, pgsql.ExecCoreExpireAfterTimeout.SQL, k.part, k.id(), now); err != nil {
				return err
			}
			if _, err := emitCompletion(ctx, tx, k, model.OutcomeExpired, now, false); err != nil {
				return err
			}
		}
		if err := emitLeaseEvent(ctx, tx, k, LeaseEventExpired, "", now); err != nil {
			return err
		}
		acted = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return acted, nil
}

// PromoteStatus is the outcome of PromoteDelayed: ff_promote_delayed's
// sub-statuses, one type with model/fcall's. The *_cleaned names are the
// library's; on Postgres there is no index entry to clean, the execution
// is just left alone.
type PromoteStatus = fcall.PromoteStatus

// PromoteDelayed outcomes (fcall's).
const (
	PromotePromoted           = fcall.PromotePromoted
	PromoteNotYetDue          = fcall.PromoteNotYetDue
	PromoteNotFoundCleaned    = fcall.PromoteNotFoundCleaned
	PromoteNotRunnableCleaned = fcall.PromoteNotRunnableCleaned
	PromoteNotDelayedCleaned  = fcall.PromoteNotDelayedCleaned
)

// PromoteDelayedParams are the inputs of PromoteDelayed.
type PromoteDelayedParams struct {
	ExecutionID model.ExecutionID
	// NowMs is the promoter's clock.
	NowMs int64
}

// PromoteDelayed makes a delayed execution whose delay has passed eligible
// again (upstream's promote_for_execution hook, which upstream never
// drives on Postgres: spec §5.1).
//
//	ff_exec_core: runnable / not_eligible_until_time with deadline_at_ms <= now →
//	  eligible_now, public_state waiting, deadline_at_ms NULL, blocking_reason NULL
func (c *Client) PromoteDelayed(ctx context.Context, p *PromoteDelayedParams) (PromoteStatus, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return "", fmt.Errorf("promote delayed %s: %w", p.ExecutionID, err)
	}
	st, err := c.promoteOne(ctx, k, p.NowMs)
	if err != nil {
		return "", fmt.Errorf("promote delayed %s: %w", p.ExecutionID, err)
	}
	return st, nil
}

func (c *Client) promoteOne(ctx context.Context, k execKey, now int64) (PromoteStatus, error) {
	var st PromoteStatus
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		var phase, elig string
		var due *int64
		err := tx.QueryRow(ctx, `SELECT lifecycle_phase, eligibility_state, deadline_at_ms FROM ff_exec_core
 WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, k.part, [16]byte(k.uuid)).Scan(&phase, &elig, &due)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			st = PromoteNotFoundCleaned
			return nil
		case err != nil:
			return err
		case phase != model.PhaseRunnable:
			st = PromoteNotRunnableCleaned
			return nil
		case elig != model.EligibleNotUntilTime:
			st = PromoteNotDelayedCleaned
			return nil
		case due != nil && *due > now:
			st = PromoteNotYetDue
			return nil
		}
		_, err = tx.Exec(ctx, `
UPDATE ff_exec_core
   SET eligibility_state = 'eligible_now', public_state = 'waiting', deadline_at_ms = NULL, blocking_reason = NULL,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), now)
		st = PromotePromoted
		return err
	})
	return st, err
}

// PromoteDelayedDue promotes every due delayed execution of one partition
// (at most limit, 0: 1000), oldest due first, each in its own transaction.
// It is the delayed promoter upstream lacks on Postgres (spec §5.1 / §9
// item 8: delayed executions were never promoted).
func (c *Client) PromoteDelayedDue(ctx context.Context, partition uint16, now int64, limit int) (*ScanResult, error) {
	pk, err := partitionKey(partition)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = ReconcileBatchDefault
	}
	cands, err := c.scanCandidates(ctx, pk, pgsql.DelayedScan.SQL, pk, now, limit)
	if err != nil {
		return nil, fmt.Errorf("promote delayed on partition %d: %w", partition, err)
	}
	res := &ScanResult{Scanned: len(cands)}
	for _, k := range cands {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		st, err := c.promoteOne(ctx, k, now)
		if err != nil {
			c.log.Warn("delayed promoter: promote failed", "execution_id", string(k.execID()), "error", err)
		}
		res.add(st == PromotePromoted, err)
	}
	return res, nil
}

// PromoteSubmitted makes executions that upstream's create_execution wrote
// as lifecycle_phase "submitted" runnable (at most limit, 0: 1000, of one
// partition), each in its own transaction: upstream never promotes them,
// so they could never be claimed (spec §9 item 1). fabric's own
// CreateExecution writes "runnable" and needs no promotion.
//
//	ff_exec_core: submitted → runnable (eligibility and public state kept:
//	  eligible_now / waiting as upstream's create wrote them)
func (c *Client) PromoteSubmitted(ctx context.Context, partition uint16, now int64, limit int) (*ScanResult, error) {
	pk, err := partitionKey(partition)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = ReconcileBatchDefault
	}
	cands, err := c.scanCandidates(ctx, pk, pgsql.SubmittedScan.SQL, pk, now, limit)
	if err != nil {
		return nil, fmt.Errorf("promote submitted on partition %d: %w", partition, err)
	}
	res := &ScanResult{Scanned: len(cands)}
	for _, k := range cands {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var acted bool
		err := c.inTx(ctx, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, pgsql.PromoteSubmitted.SQL, k.part, k.id(), now)
			acted = err == nil && tag.RowsAffected() == 1
			return err
		})
		res.add(acted, err)
	}
	return res, nil
}
