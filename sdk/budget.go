package sdk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// BudgetLimit bounds one dimension of a budget; 0 means no limit.
type BudgetLimit struct {
	// Hard: a report that would pass it is refused (UsageReport.Exceeded)
	// and adds nothing.
	Hard int64
	// Soft: a report passing it is added and flagged
	// (UsageReport.SoftBreach).
	Soft int64
}

// Budget is a spending budget that jobs report usage against
// (Job.ReportUsage): limits per dimension, e.g. "tokens" or "usd_micros".
type Budget struct {
	// ID is the budget's id; a new one when zero.
	ID model.UUID
	// ScopeType and ScopeID describe what the budget covers (e.g.
	// "tenant", "acme"); ScopeType is "custom" when empty.
	ScopeType, ScopeID string
	// Limits maps each dimension to its limits (at least one).
	Limits map[string]BudgetLimit
	// ResetEvery zeroes the usage periodically (whole milliseconds; 0:
	// never). The hosts' budget_reset plugin applies it.
	ResetEvery time.Duration
}

func (b *Budget) validate() error {
	if len(b.Limits) == 0 {
		return invalid("budget.limits", "at least one dimension is required")
	}
	for d, l := range b.Limits {
		if d == "" || strings.ContainsAny(d, ":\x00") {
			return invalid("budget.limits", "dimension %q: names must be non-empty without ':'", d)
		}
		if l.Hard < 0 || l.Soft < 0 {
			return invalid("budget.limits", "%s: limits must not be negative", d)
		}
		if l.Hard > 0 && l.Soft > l.Hard {
			return invalid("budget.limits", "%s: soft limit %d exceeds hard limit %d", d, l.Soft, l.Hard)
		}
	}
	if b.ResetEvery < 0 || b.ResetEvery%time.Millisecond != 0 {
		return invalid("budget.reset_every", "must be a non-negative whole number of milliseconds (got %s)", b.ResetEvery)
	}
	return nil
}

// CreateBudget validates b, then creates the budget (ff_create_budget on
// Valkey, an ff_budget_policy row on Postgres) and returns its id.
// Creating an existing id changes nothing.
func (c *Client) CreateBudget(ctx context.Context, b Budget) (model.UUID, error) {
	if err := b.validate(); err != nil {
		return model.UUID{}, err
	}
	if b.ID.IsZero() {
		b.ID = model.NewUUID()
	}
	dims := make([]backend.BudgetDimension, 0, len(b.Limits))
	for d, l := range b.Limits {
		dims = append(dims, backend.BudgetDimension{Name: d, Hard: l.Hard, Soft: l.Soft})
	}
	slices.SortFunc(dims, func(a, b backend.BudgetDimension) int { return cmp.Compare(a.Name, b.Name) })
	_, err := c.drv.CreateBudget(ctx, &backend.CreateBudgetParams{BudgetID: b.ID, ScopeType: cmp.Or(b.ScopeType, "custom"),
		ScopeID: b.ScopeID, EnforcementMode: "strict", OnHardLimit: "fail", OnSoftLimit: "warn",
		ResetIntervalMs: b.ResetEvery.Milliseconds(), NowMs: c.clock().UnixMilli(), Dimensions: dims})
	if err != nil {
		return model.UUID{}, fmt.Errorf("sdk: create budget %s: %w", b.ID, sdkErr(err))
	}
	return b.ID, nil
}

// sdkErr makes a driver error that matches backend.ErrInvalidInput or
// backend.ErrNotFound match the SDK's ErrInvalidInput or ErrNotFound too.
func sdkErr(err error) error {
	switch {
	case errors.Is(err, backend.ErrInvalidInput):
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	case errors.Is(err, backend.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// BudgetUsage is a budget's usage and limits per dimension.
type BudgetUsage struct {
	// Used maps each dimension that has usage to its total.
	Used map[string]int64
	// Limits maps each limited dimension to its limits.
	Limits map[string]BudgetLimit
	// NextReset is when the usage is next zeroed (zero: never).
	NextReset time.Time
}

// BudgetUsage reads a budget's usage and limits in one round trip; a
// budget that does not exist returns an error wrapping ErrNotFound.
func (c *Client) BudgetUsage(ctx context.Context, id model.UUID) (*BudgetUsage, error) {
	if id.IsZero() {
		return nil, invalid("budget", "id is empty")
	}
	st, err := c.drv.ReadBudget(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sdk: read budget %s: %w", id, sdkErr(err))
	}
	u := &BudgetUsage{Used: st.Used, Limits: map[string]BudgetLimit{}}
	for _, l := range st.Limits {
		u.Limits[l.Name] = BudgetLimit{Hard: l.Hard, Soft: l.Soft}
	}
	if st.NextResetAt > 0 {
		u.NextReset = time.UnixMilli(st.NextResetAt)
	}
	return u, nil
}

// Quota is a rate and concurrency limit that jobs take a slot of with
// Job.Admit (for example calls to a rate-limited API).
type Quota struct {
	// ID is the quota's id; a new one when zero.
	ID model.UUID
	// Window is the sliding window of MaxPerWindow (whole seconds, at
	// least one).
	Window time.Duration
	// MaxPerWindow bounds admissions per window (0: no rate limit).
	MaxPerWindow int64
	// MaxConcurrent bounds admissions held at once (0: no bound).
	MaxConcurrent int64
}

func (q *Quota) validate() error {
	if q.Window < time.Second || q.Window%time.Second != 0 {
		return invalid("quota.window", "must be a whole number of seconds, at least 1s (got %s)", q.Window)
	}
	if q.MaxPerWindow < 0 || q.MaxConcurrent < 0 {
		return invalid("quota", "limits must not be negative")
	}
	if q.MaxPerWindow == 0 && q.MaxConcurrent == 0 {
		return invalid("quota", "set MaxPerWindow, MaxConcurrent or both")
	}
	return nil
}

// CreateQuota validates q, then creates the quota policy
// (ff_create_quota_policy on Valkey, an ff_quota_policy row on Postgres)
// and returns its id. Creating an existing id changes nothing.
func (c *Client) CreateQuota(ctx context.Context, q Quota) (model.UUID, error) {
	if err := q.validate(); err != nil {
		return model.UUID{}, err
	}
	if q.ID.IsZero() {
		q.ID = model.NewUUID()
	}
	if _, err := c.drv.CreateQuota(ctx, &backend.CreateQuotaPolicyParams{QuotaID: q.ID,
		WindowSeconds: int64(q.Window / time.Second), MaxRequestsPerWindow: q.MaxPerWindow,
		MaxConcurrent: q.MaxConcurrent, NowMs: c.clock().UnixMilli()}); err != nil {
		return model.UUID{}, fmt.Errorf("sdk: create quota %s: %w", q.ID, sdkErr(err))
	}
	return q.ID, nil
}

// QuotaUsage is a quota's limits and what is taken of them now.
type QuotaUsage struct {
	Quota
	// InWindow counts admissions in the current window; Concurrent the
	// admissions held (not yet released).
	InWindow, Concurrent int64
}

// QuotaUsage reads a quota's limits and usage in one round trip; a quota
// that does not exist returns an error wrapping ErrNotFound.
func (c *Client) QuotaUsage(ctx context.Context, id model.UUID) (*QuotaUsage, error) {
	if id.IsZero() {
		return nil, invalid("quota", "id is empty")
	}
	st, err := c.drv.ReadQuota(ctx, &backend.ReadQuotaParams{QuotaID: id, NowMs: c.clock().UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("sdk: read quota %s: %w", id, sdkErr(err))
	}
	return &QuotaUsage{Quota: Quota{ID: id, Window: time.Duration(st.WindowSeconds) * time.Second,
		MaxPerWindow: st.MaxRequestsPerWindow, MaxConcurrent: st.MaxConcurrent},
		InWindow: st.InWindow, Concurrent: st.Concurrent}, nil
}

// Admission is the answer of Job.Admit.
type Admission struct {
	// Admitted: the job holds a slot of the quota until Release (or,
	// past a crash, until the quota reconciler finds its guard expired).
	Admitted bool
	// RetryAfter, when the window is full, is how long until a slot
	// frees; the handler can return DelayFor(RetryAfter).
	RetryAfter time.Duration
	// Reason is "rate" or "concurrency" when not admitted.
	Reason string

	l     *Lease
	quota model.UUID
}

// Release gives the admission's concurrency slot back
// (ff_release_admission); call it once. It does nothing when not
// admitted.
func (a *Admission) Release(ctx context.Context) error {
	if !a.Admitted {
		return nil
	}
	if err := a.l.w.drv.ReleaseAdmission(ctx, &backend.ReleaseAdmissionParams{QuotaID: a.quota, ExecutionID: a.l.ID}); err != nil {
		return fmt.Errorf("sdk: release quota %s: %w", a.quota, sdkErr(err))
	}
	return nil
}

// Admit takes a slot of quota for this execution
// (ff_check_admission_and_record on Valkey, the quota's ff_quota_* rows
// on Postgres; under the limits stored with the quota): once per execution per window — a repeat while admitted is
// admitted again without counting twice. Release the slot when the
// rate-limited work is done (defer a.Release(ctx)).
func (l *Lease) Admit(ctx context.Context, quota model.UUID) (*Admission, error) {
	if quota.IsZero() {
		return nil, invalid("quota", "id is empty")
	}
	res, err := l.w.drv.Admit(ctx, &backend.AdmitParams{QuotaID: quota, ExecutionID: l.ID, NowMs: l.w.cfg.Clock().UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("sdk: admit %s on quota %s: %w", l.ID, quota, sdkErr(err))
	}
	a := &Admission{l: l, quota: quota}
	switch res.Status {
	case backend.AdmissionAdmitted, backend.AdmissionAlreadyAdmitted:
		a.Admitted = true
	case backend.AdmissionRateExceeded:
		a.Reason, a.RetryAfter = "rate", time.Duration(res.RetryAfterMs)*time.Millisecond
	case backend.AdmissionConcurrencyExceeded:
		a.Reason = "concurrency"
	}
	return a, nil
}

// Admit takes a slot of a quota (see Lease.Admit).
func (j *Job) Admit(ctx context.Context, quota model.UUID) (*Admission, error) {
	return j.lease.Admit(ctx, quota)
}

// Admitting returns a middleware that takes a slot of quota (Job.Admit)
// before the handler runs and releases it when the handler returns: a job
// over the quota's rate is delayed until its window frees a slot
// (DelayFor(RetryAfter)), one over its concurrency bound is delayed by
// busy; a delayed job keeps its attempt and is admitted again when it
// runs. An error reading the quota fails the attempt (retried per policy).
func Admitting(quota model.UUID, busy time.Duration) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, job *Job) error {
			a, err := job.Admit(ctx, quota)
			if err != nil {
				return err
			}
			if !a.Admitted {
				if a.Reason == "rate" {
					return DelayFor(max(a.RetryAfter, time.Millisecond))
				}
				return DelayFor(busy)
			}
			defer func() {
				if err := a.Release(context.WithoutCancel(ctx)); err != nil {
					job.lease.w.log.Warn("quota slot not released; on Valkey the quota reconciler recounts it",
						"execution_id", job.ID, "quota", quota.String(), "error", err)
				}
			}()
			return next(ctx, job)
		}
	}
}
