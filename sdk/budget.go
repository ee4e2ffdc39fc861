package sdk

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
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

// CreateBudget validates b, then creates the budget (ff_create_budget)
// and returns its id. Creating an existing id changes nothing.
func (c *Client) CreateBudget(ctx context.Context, b Budget) (model.UUID, error) {
	if err := b.validate(); err != nil {
		return model.UUID{}, err
	}
	if c.vc == nil {
		return model.UUID{}, errNotOnPostgres("Client.CreateBudget")
	}
	if b.ID.IsZero() {
		b.ID = model.NewUUID()
	}
	dims := make([]valkey.BudgetDimension, 0, len(b.Limits))
	for d, l := range b.Limits {
		dims = append(dims, valkey.BudgetDimension{Name: d, Hard: l.Hard, Soft: l.Soft})
	}
	slices.SortFunc(dims, func(a, b valkey.BudgetDimension) int { return cmp.Compare(a.Name, b.Name) })
	_, err := c.vc.CreateBudget(ctx, &valkey.CreateBudgetParams{BudgetID: b.ID, ScopeType: cmp.Or(b.ScopeType, "custom"),
		ScopeID: b.ScopeID, EnforcementMode: "strict", OnHardLimit: "fail", OnSoftLimit: "warn",
		ResetIntervalMs: b.ResetEvery.Milliseconds(), NowMs: c.clock().UnixMilli(), Dimensions: dims})
	if err != nil {
		return model.UUID{}, fmt.Errorf("sdk: %w", err)
	}
	return b.ID, nil
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
	if c.vc == nil {
		return nil, errNotOnPostgres("Client.BudgetUsage")
	}
	k := model.BudgetKeysFor(c.parts.BudgetPartition(id), id)
	raw := c.vc.Raw()
	res := raw.DoMulti(ctx, raw.B().Hgetall().Key(k.Definition()).Build(),
		raw.B().Hgetall().Key(k.Usage()).Build(), raw.B().Hgetall().Key(k.Limits()).Build())
	var maps [3]map[string]string
	for i, r := range res {
		m, err := r.AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("sdk: read budget %s: %w", id, err)
		}
		maps[i] = m
	}
	if len(maps[0]) == 0 {
		return nil, fmt.Errorf("sdk: budget %s: %w", id, ErrNotFound)
	}
	u := &BudgetUsage{Used: map[string]int64{}, Limits: map[string]BudgetLimit{}}
	for d, v := range maps[1] {
		u.Used[d], _ = strconv.ParseInt(v, 10, 64)
	}
	for f, v := range maps[2] {
		kind, d, ok := strings.Cut(f, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		l := u.Limits[d]
		switch kind {
		case "hard":
			l.Hard = n
		case "soft":
			l.Soft = n
		default:
			continue
		}
		u.Limits[d] = l
	}
	if ms, _ := strconv.ParseInt(maps[0]["next_reset_at"], 10, 64); ms > 0 {
		u.NextReset = time.UnixMilli(ms)
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
// (ff_create_quota_policy) and returns its id. Creating an existing id
// changes nothing.
func (c *Client) CreateQuota(ctx context.Context, q Quota) (model.UUID, error) {
	if err := q.validate(); err != nil {
		return model.UUID{}, err
	}
	if c.vc == nil {
		return model.UUID{}, errNotOnPostgres("Client.CreateQuota")
	}
	if q.ID.IsZero() {
		q.ID = model.NewUUID()
	}
	if _, err := c.vc.CreateQuotaPolicy(ctx, &valkey.CreateQuotaPolicyParams{QuotaID: q.ID,
		WindowSeconds: int64(q.Window / time.Second), MaxRequestsPerWindow: q.MaxPerWindow,
		MaxConcurrent: q.MaxConcurrent, NowMs: c.clock().UnixMilli()}); err != nil {
		return model.UUID{}, fmt.Errorf("sdk: %w", err)
	}
	return q.ID, nil
}

// quotaWindow is the window dimension admissions are recorded in: the
// one FlowFabric's unblock scanner and quota reconciler read.
const quotaWindow = "requests_per_window"

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
	if c.vc == nil {
		return nil, errNotOnPostgres("Client.QuotaUsage")
	}
	k := model.QuotaKeysFor(c.parts.QuotaPartition(id), id)
	raw := c.vc.Raw()
	res := raw.DoMulti(ctx, raw.B().Hgetall().Key(k.Definition()).Build(),
		raw.B().Zrangebyscore().Key(k.Window(quotaWindow)).Min("-inf").Max("+inf").Withscores().Build(),
		raw.B().Get().Key(k.Concurrency()).Build())
	def, err := res[0].AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("sdk: read quota %s: %w", id, err)
	}
	if len(def) == 0 {
		return nil, fmt.Errorf("sdk: quota %s: %w", id, ErrNotFound)
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(def[f], 10, 64); return n }
	u := &QuotaUsage{Quota: Quota{ID: id, Window: time.Duration(num("requests_per_window_seconds")) * time.Second,
		MaxPerWindow: num("max_requests_per_window"), MaxConcurrent: num("active_concurrency_cap")}}
	entries, err := res[1].AsZScores()
	if err != nil {
		return nil, fmt.Errorf("sdk: read quota %s window: %w", id, err)
	}
	since := float64(c.clock().Add(-u.Window).UnixMilli())
	for _, e := range entries {
		if e.Score > since {
			u.InWindow++
		}
	}
	if s, err := res[2].ToString(); err == nil {
		u.Concurrent, _ = strconv.ParseInt(s, 10, 64)
	}
	return u, nil
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
	if err := a.l.w.vc.ReleaseAdmission(ctx, a.quota, a.l.ID); err != nil {
		return fmt.Errorf("sdk: %w", err)
	}
	return nil
}

// Admit takes a slot of quota for this execution
// (ff_check_admission_and_record, under the limits stored with the
// quota): once per execution per window — a repeat while admitted is
// admitted again without counting twice. Release the slot when the
// rate-limited work is done (defer a.Release(ctx)).
func (l *Lease) Admit(ctx context.Context, quota model.UUID) (*Admission, error) {
	if l.w.pg != nil {
		return nil, errNotOnPostgres("Lease.Admit")
	}
	if quota.IsZero() {
		return nil, invalid("quota", "id is empty")
	}
	k := model.QuotaKeysFor(l.w.parts.QuotaPartition(quota), quota)
	raw := l.w.vc.Raw()
	def, err := raw.Do(ctx, raw.B().Hmget().Key(k.Definition()).
		Field("requests_per_window_seconds", "max_requests_per_window", "active_concurrency_cap").Build()).ToArray()
	if err != nil || len(def) != 3 {
		return nil, fmt.Errorf("sdk: read quota %s: %w", quota, err)
	}
	var lim [3]int64
	for i, v := range def {
		s, err := v.ToString()
		if err != nil {
			return nil, fmt.Errorf("sdk: quota %s: %w", quota, ErrNotFound)
		}
		lim[i], _ = strconv.ParseInt(s, 10, 64)
	}
	res, err := l.w.vc.CheckAdmission(ctx, &valkey.CheckAdmissionParams{QuotaID: quota, Dimension: quotaWindow,
		NowMs: l.w.cfg.Clock().UnixMilli(), WindowSeconds: lim[0], RateLimit: lim[1], ConcurrencyCap: lim[2],
		ExecutionID: l.ID})
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	a := &Admission{l: l, quota: quota}
	switch res.Status {
	case valkey.AdmissionAdmitted, valkey.AdmissionAlreadyAdmitted:
		a.Admitted = true
	case valkey.AdmissionRateExceeded:
		a.Reason, a.RetryAfter = "rate", time.Duration(res.RetryAfterMs)*time.Millisecond
	case valkey.AdmissionConcurrencyExceeded:
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
					job.lease.w.log.Warn("quota slot not released; the quota reconciler recounts it",
						"execution_id", job.ID, "quota", quota.String(), "error", err)
				}
			}()
			return next(ctx, job)
		}
	}
}
