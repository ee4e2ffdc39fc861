package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Logical errors of the budget and quota operations.
const (
	CodeBudgetNotFound ErrorCode = "budget_not_found"
	CodeQuotaNotFound  ErrorCode = "quota_not_found"
)

// Parameter and result types of the budget, quota and progress
// operations (defined once in package backend).
type (
	CreateBudgetParams      = backend.CreateBudgetParams
	CreateBudgetResult      = backend.CreateBudgetResult
	BudgetStatus            = backend.BudgetStatus
	ReportUsageParams       = backend.ReportUsageParams
	UsageResult             = backend.UsageResult
	CreateQuotaPolicyParams = backend.CreateQuotaPolicyParams
	ReadQuotaParams         = backend.ReadQuotaParams
	QuotaStatus             = backend.QuotaStatus
	AdmitParams             = backend.AdmitParams
	AdmissionResult         = backend.AdmissionResult
	ReleaseAdmissionParams  = backend.ReleaseAdmissionParams
	ReportProgressParams    = backend.ReportProgressParams
)

// budgetPolicy is ff_budget_policy.policy_json as fabric writes it: the
// create parameters, with the limits per dimension. reset_interval_ms is
// what the budget_reset reconciler (model/pgsql, pg_budget_reset) reads.
type budgetPolicy struct {
	BudgetID        string           `json:"budget_id"`
	ScopeType       string           `json:"scope_type"`
	ScopeID         string           `json:"scope_id"`
	EnforcementMode string           `json:"enforcement_mode"`
	OnHardLimit     string           `json:"on_hard_limit"`
	OnSoftLimit     string           `json:"on_soft_limit"`
	ResetIntervalMs int64            `json:"reset_interval_ms"`
	HardLimits      map[string]int64 `json:"hard_limits"`
	SoftLimits      map[string]int64 `json:"soft_limits"`
}

// usageInitKey is the dimensions_key upstream reserves (skipped when
// usage is read).
const usageInitKey = "_init"

func (c *Client) budgetPK(id model.UUID) int16 { return int16(c.parts.BudgetPartition(id).Index) }
func (c *Client) quotaPK(id model.UUID) int16  { return int16(c.parts.QuotaPartition(id).Index) }

func (c *Client) orNow(ms int64) int64 { return cmp.Or(ms, c.nowMs()) }

// CreateBudget validates p, then creates the budget (ff_create_budget's
// counterpart): an ff_budget_policy row with policy_json (limits per
// dimension, reset_interval_ms), scope, enforcement mode and, with a
// reset interval, next_reset_at_ms = now + interval (the budget_reset
// reconciler's schedule). Usage rows are created by the first spend. An
// existing id changes nothing and reports AlreadyExisted.
func (c *Client) CreateBudget(ctx context.Context, p *CreateBudgetParams) (*CreateBudgetResult, error) {
	if err := backend.ValidateCreateBudget(p); err != nil {
		return nil, fmt.Errorf("create budget: %w", err)
	}
	now := c.orNow(p.NowMs)
	pol := budgetPolicy{BudgetID: p.BudgetID.String(), ScopeType: p.ScopeType, ScopeID: p.ScopeID,
		EnforcementMode: p.EnforcementMode, OnHardLimit: p.OnHardLimit, OnSoftLimit: p.OnSoftLimit,
		ResetIntervalMs: p.ResetIntervalMs, HardLimits: map[string]int64{}, SoftLimits: map[string]int64{}}
	for _, d := range p.Dimensions {
		pol.HardLimits[d.Name], pol.SoftLimits[d.Name] = d.Hard, d.Soft
	}
	doc, _ := json.Marshal(pol) // plain strings and maps always marshal
	var next *int64
	if p.ResetIntervalMs > 0 {
		n := now + p.ResetIntervalMs
		next = &n
	}
	tag, err := c.pool.Exec(ctx, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms,
    scope_type, scope_id, enforcement_mode, next_reset_at_ms)
VALUES ($1, $2, $3::jsonb, $4, $4, $5, $6, $7, $8)
ON CONFLICT (partition_key, budget_id) DO NOTHING`, c.budgetPK(p.BudgetID), p.BudgetID.String(), string(doc), now,
		p.ScopeType, p.ScopeID, p.EnforcementMode, next)
	if err != nil {
		return nil, fmt.Errorf("create budget %s: %w", p.BudgetID, notMigrated(err))
	}
	return &CreateBudgetResult{BudgetID: p.BudgetID.String(), AlreadyExisted: tag.RowsAffected() == 0}, nil
}

// ReadBudget reads a budget's policy and usage in one statement. A
// missing budget is CodeBudgetNotFound.
func (c *Client) ReadBudget(ctx context.Context, id model.UUID) (*BudgetStatus, error) {
	if id.IsZero() {
		return nil, fmt.Errorf("read budget: %w: budget id is empty", backend.ErrInvalidInput)
	}
	var (
		doc, used []byte
		next      *int64
	)
	st := &BudgetStatus{BudgetID: id, Used: map[string]int64{}}
	err := c.pool.QueryRow(ctx, `SELECT policy_json, scope_type, scope_id, next_reset_at_ms, breach_count, soft_breach_count,
       (SELECT coalesce(jsonb_object_agg(u.dimensions_key, u.current_value), '{}'::jsonb) FROM ff_budget_usage u
         WHERE u.partition_key = $1 AND u.budget_id = p.budget_id AND u.dimensions_key <> $3)
  FROM ff_budget_policy p WHERE p.partition_key = $1 AND p.budget_id = $2`, c.budgetPK(id), id.String(), usageInitKey).
		Scan(&doc, &st.ScopeType, &st.ScopeID, &next, &st.BreachCount, &st.SoftBreachCount, &used)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read budget %s: %w", id, CodeBudgetNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read budget %s: %w", id, notMigrated(err))
	}
	var pol budgetPolicy
	if err := json.Unmarshal(doc, &pol); err != nil {
		return nil, fmt.Errorf("read budget %s: policy_json: %w", id, err)
	}
	if err := json.Unmarshal(used, &st.Used); err != nil {
		return nil, fmt.Errorf("read budget %s: usage: %w", id, err)
	}
	if next != nil {
		st.NextResetAt = *next
	}
	st.Limits = pol.limits()
	return st, nil
}

// limits are the policy's dimensions, sorted by name.
func (pol *budgetPolicy) limits() []backend.BudgetDimension {
	var out []backend.BudgetDimension
	for name, hard := range pol.HardLimits {
		out = append(out, backend.BudgetDimension{Name: name, Hard: hard, Soft: pol.SoftLimits[name]})
	}
	for name, soft := range pol.SoftLimits {
		if _, ok := pol.HardLimits[name]; !ok {
			out = append(out, backend.BudgetDimension{Name: name, Soft: soft})
		}
	}
	slices.SortFunc(out, func(a, b backend.BudgetDimension) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// RecordSpend validates p, then applies a usage report
// (ff_record_spend's counterpart) in one transaction that holds the
// budget's policy row lock (as the budget_reset reconciler takes it
// first, reports and resets are serialised):
//
//	a DedupID seen within 24 h (ff_budget_usage_dedup): ALREADY_APPLIED, nothing written
//	a dimension whose usage + delta passes its hard limit (> 0): ff_budget_policy
//	  breach_count + 1, last_breach_at_ms / last_breach_dim; HARD_BREACH, no usage added
//	otherwise: ff_budget_usage += delta per dimension; ff_budget_usage_by_exec += delta
//	  when ExecutionID is set; the dedup row (expires now + 24 h); updated_at_ms now,
//	  soft_breach_count + 1 when a dimension passed its soft limit (> 0): SOFT_BREACH
//	  for the first such dimension in report order, else OK
//
// A missing budget is CodeBudgetNotFound.
func (c *Client) RecordSpend(ctx context.Context, p *ReportUsageParams) (*UsageResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("record spend: %w", err)
	}
	var exec *[16]byte
	if p.ExecutionID != "" {
		k, err := splitExecID(p.ExecutionID)
		if err != nil {
			return nil, fmt.Errorf("record spend: %w: %w", backend.ErrInvalidInput, err)
		}
		u := [16]byte(k.uuid)
		exec = &u
	}
	pk, id, now := c.budgetPK(p.BudgetID), p.BudgetID.String(), c.orNow(p.NowMs)
	dims := make([]string, len(p.Deltas))
	deltas := make([]int64, len(p.Deltas))
	for i, d := range p.Deltas {
		dims[i], deltas[i] = d.Dimension, d.Delta
	}
	var res *UsageResult
	err := c.inTxRetry(ctx, func(tx pgx.Tx) error {
		var doc []byte
		err := tx.QueryRow(ctx, `SELECT policy_json FROM ff_budget_policy WHERE partition_key = $1 AND budget_id = $2 FOR UPDATE`,
			pk, id).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeBudgetNotFound
		}
		if err != nil {
			return err
		}
		var pol budgetPolicy
		if err := json.Unmarshal(doc, &pol); err != nil {
			return fmt.Errorf("policy_json: %w", err)
		}
		if p.DedupID != "" {
			var seen bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ff_budget_usage_dedup
 WHERE partition_key = $1 AND dedup_key = $2 AND expires_at_ms > $3)`, pk, p.DedupID, now).Scan(&seen); err != nil {
				return err
			}
			if seen {
				res = &UsageResult{Status: backend.BudgetAlreadyApplied}
				return nil
			}
		}
		cur := map[string]int64{}
		rows, err := tx.Query(ctx, `SELECT dimensions_key, current_value FROM ff_budget_usage
 WHERE partition_key = $1 AND budget_id = $2 AND dimensions_key = ANY($3)`, pk, id, dims)
		if err != nil {
			return err
		}
		for rows.Next() {
			var d string
			var v int64
			if err := rows.Scan(&d, &v); err != nil {
				return err
			}
			cur[d] = v
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i, d := range dims {
			if hard := pol.HardLimits[d]; hard > 0 && cur[d]+deltas[i] > hard {
				_, err := tx.Exec(ctx, `UPDATE ff_budget_policy SET breach_count = breach_count + 1, last_breach_at_ms = $3,
    last_breach_dim = $4, updated_at_ms = $3 WHERE partition_key = $1 AND budget_id = $2`, pk, id, now, d)
				res = &UsageResult{Status: backend.BudgetHardBreach, Dimension: d, Current: strconv.FormatInt(cur[d], 10),
					Limit: strconv.FormatInt(hard, 10)}
				return err
			}
		}
		res = &UsageResult{Status: backend.BudgetOK}
		for i, d := range dims {
			v := cur[d] + deltas[i]
			if soft := pol.SoftLimits[d]; soft > 0 && v > soft && res.Status == backend.BudgetOK {
				res = &UsageResult{Status: backend.BudgetSoftBreach, Dimension: d, Current: strconv.FormatInt(v, 10),
					Limit: strconv.FormatInt(soft, 10)}
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ff_budget_usage (partition_key, budget_id, dimensions_key, current_value, updated_at_ms)
SELECT $1, $2, d, v, $5 FROM unnest($3::text[], $4::bigint[]) AS t(d, v)
ON CONFLICT (partition_key, budget_id, dimensions_key) DO UPDATE
   SET current_value = ff_budget_usage.current_value + EXCLUDED.current_value, updated_at_ms = EXCLUDED.updated_at_ms`,
			pk, id, dims, deltas, now); err != nil {
			return err
		}
		if exec != nil {
			if _, err := tx.Exec(ctx, `INSERT INTO ff_budget_usage_by_exec (partition_key, budget_id, execution_id, dimensions_key,
    delta_total, updated_at_ms)
SELECT $1, $2, $3, d, v, $6 FROM unnest($4::text[], $5::bigint[]) AS t(d, v)
ON CONFLICT (partition_key, budget_id, execution_id, dimensions_key) DO UPDATE
   SET delta_total = ff_budget_usage_by_exec.delta_total + EXCLUDED.delta_total, updated_at_ms = EXCLUDED.updated_at_ms`,
				pk, id, *exec, dims, deltas, now); err != nil {
				return err
			}
		}
		if p.DedupID != "" {
			out, _ := json.Marshal(res)
			if _, err := tx.Exec(ctx, `INSERT INTO ff_budget_usage_dedup (partition_key, dedup_key, outcome_json, applied_at_ms, expires_at_ms)
VALUES ($1, $2, $3::jsonb, $4, $5)
ON CONFLICT (partition_key, dedup_key) DO UPDATE
   SET outcome_json = EXCLUDED.outcome_json, applied_at_ms = EXCLUDED.applied_at_ms, expires_at_ms = EXCLUDED.expires_at_ms`,
				pk, p.DedupID, string(out), now, now+backend.BudgetDedupTTLMs); err != nil {
				return err
			}
		}
		soft := 0
		if res.Status == backend.BudgetSoftBreach {
			soft = 1
		}
		_, err = tx.Exec(ctx, `UPDATE ff_budget_policy SET updated_at_ms = $3, soft_breach_count = soft_breach_count + $4
 WHERE partition_key = $1 AND budget_id = $2`, pk, id, now, soft)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record spend on budget %s: %w", p.BudgetID, err)
	}
	return res, nil
}

// CreateQuota validates p, then creates the quota policy
// (ff_create_quota_policy's counterpart: an ff_quota_policy row,
// active_concurrency 0) and reports whether it already existed (an
// existing id changes nothing).
func (c *Client) CreateQuota(ctx context.Context, p *CreateQuotaPolicyParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, fmt.Errorf("create quota: %w", err)
	}
	tag, err := c.pool.Exec(ctx, `INSERT INTO ff_quota_policy (partition_key, quota_policy_id, requests_per_window_seconds,
    max_requests_per_window, active_concurrency_cap, active_concurrency, created_at_ms, updated_at_ms)
VALUES ($1, $2, $3, $4, $5, 0, $6, $6)
ON CONFLICT (partition_key, quota_policy_id) DO NOTHING`, c.quotaPK(p.QuotaID), p.QuotaID.String(), p.WindowSeconds,
		p.MaxRequestsPerWindow, p.MaxConcurrent, c.orNow(p.NowMs))
	if err != nil {
		return false, fmt.Errorf("create quota %s: %w", p.QuotaID, notMigrated(err))
	}
	return tag.RowsAffected() == 0, nil
}

// ReadQuota reads a quota's limits, its concurrency counter and the
// admissions of its window ending at NowMs, in one statement. A missing
// quota is CodeQuotaNotFound.
func (c *Client) ReadQuota(ctx context.Context, p *ReadQuotaParams) (*QuotaStatus, error) {
	if p.QuotaID.IsZero() {
		return nil, fmt.Errorf("read quota: %w: quota id is empty", backend.ErrInvalidInput)
	}
	st := &QuotaStatus{QuotaID: p.QuotaID}
	err := c.pool.QueryRow(ctx, `SELECT requests_per_window_seconds, max_requests_per_window, active_concurrency_cap,
       active_concurrency,
       (SELECT count(*) FROM ff_quota_window w WHERE w.partition_key = $1
           AND w.quota_policy_id = q.quota_policy_id AND w.dimension = $3
           AND w.admitted_at_ms > $4 - q.requests_per_window_seconds * 1000)
  FROM ff_quota_policy q WHERE q.partition_key = $1 AND q.quota_policy_id = $2`,
		c.quotaPK(p.QuotaID), p.QuotaID.String(), backend.QuotaAdmitDimension, c.orNow(p.NowMs)).
		Scan(&st.WindowSeconds, &st.MaxRequestsPerWindow, &st.MaxConcurrent, &st.Concurrent, &st.InWindow)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read quota %s: %w", p.QuotaID, CodeQuotaNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read quota %s: %w", p.QuotaID, notMigrated(err))
	}
	return st, nil
}

// Admit validates p, then takes a slot of the quota for the execution
// (ff_check_admission_and_record's counterpart, jitter 0) in one
// transaction that holds the quota's policy row lock:
//
//	an unexpired ff_quota_admitted guard of the execution: ALREADY_ADMITTED
//	ff_quota_window rows older than the window deleted; a rate limit (> 0) reached:
//	  RATE_EXCEEDED, retry after oldest + window - now (>= 0)
//	with a concurrency cap (> 0): expired guards deleted and their slots given back
//	  (what Valkey's quota_reconciler does by recounting the live guards); the cap
//	  reached: CONCURRENCY_EXCEEDED
//	otherwise ADMITTED: ff_quota_window row (now, execution; one per execution),
//	  ff_quota_admitted guard expiring after the window, active_concurrency + 1 when capped
//
// Window rows carry the full execution id, on the quota partition (spec
// postgres.md §1). A missing quota is CodeQuotaNotFound.
func (c *Client) Admit(ctx context.Context, p *AdmitParams) (*AdmissionResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	pk, id, eid, now := c.quotaPK(p.QuotaID), p.QuotaID.String(), string(p.ExecutionID), c.orNow(p.NowMs)
	dim := backend.QuotaAdmitDimension
	var res *AdmissionResult
	err := c.inTxRetry(ctx, func(tx pgx.Tx) error {
		var windowS, rate, capacity, active int64
		err := tx.QueryRow(ctx, `SELECT requests_per_window_seconds, max_requests_per_window, active_concurrency_cap, active_concurrency
  FROM ff_quota_policy WHERE partition_key = $1 AND quota_policy_id = $2 FOR UPDATE`, pk, id).Scan(&windowS, &rate, &capacity, &active)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeQuotaNotFound
		}
		if err != nil {
			return err
		}
		windowMs := windowS * 1000
		var held bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ff_quota_admitted
 WHERE partition_key = $1 AND quota_policy_id = $2 AND execution_id = $3 AND expires_at_ms > $4)`, pk, id, eid, now).Scan(&held); err != nil {
			return err
		}
		if held {
			res = &AdmissionResult{Status: backend.AdmissionAlreadyAdmitted}
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM ff_quota_window
 WHERE partition_key = $1 AND quota_policy_id = $2 AND dimension = $3 AND admitted_at_ms < $4`, pk, id, dim, now-windowMs); err != nil {
			return err
		}
		if rate > 0 {
			var n int64
			var oldest *int64
			if err := tx.QueryRow(ctx, `SELECT count(*), min(admitted_at_ms) FROM ff_quota_window
 WHERE partition_key = $1 AND quota_policy_id = $2 AND dimension = $3`, pk, id, dim).Scan(&n, &oldest); err != nil {
				return err
			}
			if n >= rate {
				wait := int64(0)
				if oldest != nil {
					wait = max(*oldest+windowMs-now, 0)
				}
				res = &AdmissionResult{Status: backend.AdmissionRateExceeded, RetryAfterMs: wait}
				return nil
			}
		}
		if capacity > 0 {
			// Valkey's quota_reconciler recounts the counter from the
			// live guards; here the guards that expired give their slots
			// back when they would refuse an admission.
			tag, err := tx.Exec(ctx, `DELETE FROM ff_quota_admitted
 WHERE partition_key = $1 AND quota_policy_id = $2 AND expires_at_ms <= $3`, pk, id, now)
			if err != nil {
				return err
			}
			if n := tag.RowsAffected(); n > 0 {
				active = max(active-n, 0)
				if _, err := tx.Exec(ctx, `UPDATE ff_quota_policy SET active_concurrency = $3, updated_at_ms = $4
 WHERE partition_key = $1 AND quota_policy_id = $2`, pk, id, active, now); err != nil {
					return err
				}
			}
		}
		if capacity > 0 && active >= capacity {
			res = &AdmissionResult{Status: backend.AdmissionConcurrencyExceeded}
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM ff_quota_window
 WHERE partition_key = $1 AND quota_policy_id = $2 AND dimension = $3 AND execution_id = $4`, pk, id, dim, eid); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ff_quota_window (partition_key, quota_policy_id, dimension, admitted_at_ms, execution_id)
VALUES ($1, $2, $3, $4, $5)`, pk, id, dim, now, eid); err != nil {
			return err
		}
		if windowMs > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO ff_quota_admitted (partition_key, quota_policy_id, execution_id, admitted_at_ms, expires_at_ms)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (partition_key, quota_policy_id, execution_id) DO UPDATE
   SET admitted_at_ms = EXCLUDED.admitted_at_ms, expires_at_ms = EXCLUDED.expires_at_ms`, pk, id, eid, now, now+windowMs); err != nil {
				return err
			}
		}
		if capacity > 0 {
			if _, err := tx.Exec(ctx, `UPDATE ff_quota_policy SET active_concurrency = active_concurrency + 1, updated_at_ms = $3
 WHERE partition_key = $1 AND quota_policy_id = $2`, pk, id, now); err != nil {
				return err
			}
		}
		res = &AdmissionResult{Status: backend.AdmissionAdmitted}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("admit %s on quota %s: %w", p.ExecutionID, p.QuotaID, err)
	}
	return res, nil
}

// ReleaseAdmission validates p, then (ff_release_admission's
// counterpart) deletes the execution's ff_quota_admitted guard and, when
// there was one, decrements active_concurrency (floored at 0), in one
// transaction: unlike the Valkey library, a second release, or one after
// Admit reclaimed the expired guard, gives nothing back. A quota that
// does not exist changes nothing.
func (c *Client) ReleaseAdmission(ctx context.Context, p *ReleaseAdmissionParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("release admission: %w", err)
	}
	pk, id := c.quotaPK(p.QuotaID), p.QuotaID.String()
	err := c.inTxRetry(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM ff_quota_admitted WHERE partition_key = $1 AND quota_policy_id = $2 AND execution_id = $3`,
			pk, id, string(p.ExecutionID))
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE ff_quota_policy SET active_concurrency = active_concurrency - 1, updated_at_ms = $3
 WHERE partition_key = $1 AND quota_policy_id = $2 AND active_concurrency > 0`, pk, id, c.nowMs())
		return err
	})
	if err != nil {
		return fmt.Errorf("release admission %s on quota %s: %w", p.ExecutionID, p.QuotaID, err)
	}
	return nil
}

// ReportProgress validates p, then records the fenced attempt's progress
// (ff_update_progress's counterpart) on ff_exec_core.raw_fields:
// progress_pct (decimal text), progress_message when not empty,
// progress_updated_at and last_mutation_at now. A fence that no longer
// holds the lease is CodeStaleLease, CodeLeaseExpired or
// CodeExecutionNotActive.
func (c *Client) ReportProgress(ctx context.Context, p *ReportProgressParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("report progress: %w", err)
	}
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return fmt.Errorf("report progress of %s: %w", p.ExecutionID, err)
	}
	fields := map[string]string{"progress_pct": strconv.FormatFloat(p.Pct, 'f', -1, 64)}
	if p.Message != "" {
		fields["progress_message"] = p.Message
	}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		if _, err := c.checkFence(ctx, tx, k, p.Fence, now); err != nil {
			return err
		}
		ms := strconv.FormatInt(now, 10)
		fields["progress_updated_at"], fields["last_mutation_at"] = ms, ms
		doc, _ := json.Marshal(fields)
		_, err := tx.Exec(ctx, `UPDATE ff_exec_core SET raw_fields = raw_fields || $3::jsonb
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), string(doc))
		return err
	})
	if err != nil {
		return fmt.Errorf("report progress of %s: %w", p.ExecutionID, err)
	}
	return nil
}

// mapBudgetErr is mapErr with the budget and quota codes.
func mapBudgetErr(err error, fenced bool) error {
	if errors.Is(err, CodeBudgetNotFound) || errors.Is(err, CodeQuotaNotFound) {
		return fmt.Errorf("%w: %w", backend.ErrNotFound, err)
	}
	return mapErr(err, fenced)
}

// CreateBudget implements backend.BudgetDriver.
func (d *Driver) CreateBudget(ctx context.Context, p *backend.CreateBudgetParams) (*backend.CreateBudgetResult, error) {
	r, err := d.c.CreateBudget(ctx, p)
	return r, mapBudgetErr(err, false)
}

// ReadBudget implements backend.BudgetDriver.
func (d *Driver) ReadBudget(ctx context.Context, id model.UUID) (*backend.BudgetStatus, error) {
	r, err := d.c.ReadBudget(ctx, id)
	return r, mapBudgetErr(err, false)
}

// RecordSpend implements backend.BudgetDriver.
func (d *Driver) RecordSpend(ctx context.Context, p *backend.ReportUsageParams) (*backend.UsageResult, error) {
	r, err := d.c.RecordSpend(ctx, p)
	return r, mapBudgetErr(err, false)
}

// CreateQuota implements backend.BudgetDriver.
func (d *Driver) CreateQuota(ctx context.Context, p *backend.CreateQuotaPolicyParams) (bool, error) {
	existed, err := d.c.CreateQuota(ctx, p)
	return existed, mapBudgetErr(err, false)
}

// ReadQuota implements backend.BudgetDriver.
func (d *Driver) ReadQuota(ctx context.Context, p *backend.ReadQuotaParams) (*backend.QuotaStatus, error) {
	r, err := d.c.ReadQuota(ctx, p)
	return r, mapBudgetErr(err, false)
}

// Admit implements backend.BudgetDriver.
func (d *Driver) Admit(ctx context.Context, p *backend.AdmitParams) (*backend.AdmissionResult, error) {
	r, err := d.c.Admit(ctx, p)
	return r, mapBudgetErr(err, false)
}

// ReleaseAdmission implements backend.BudgetDriver.
func (d *Driver) ReleaseAdmission(ctx context.Context, p *backend.ReleaseAdmissionParams) error {
	return mapBudgetErr(d.c.ReleaseAdmission(ctx, p), false)
}

// ReportProgress implements backend.BudgetDriver.
func (d *Driver) ReportProgress(ctx context.Context, p *backend.ReportProgressParams) error {
	return mapBudgetErr(d.c.ReportProgress(ctx, p), true)
}
