package valkey

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// orNow is ms, or the driver's clock when ms is 0.
func orNow(ms int64) int64 { return cmp.Or(ms, nowMs()) }

// CreateBudget implements backend.BudgetDriver (ff_create_budget), after
// validating p.
func (d *Driver) CreateBudget(ctx context.Context, p *backend.CreateBudgetParams) (*backend.CreateBudgetResult, error) {
	if err := backend.ValidateCreateBudget(p); err != nil {
		return nil, fmt.Errorf("create budget: %w", err)
	}
	q := *p
	q.NowMs = orNow(p.NowMs)
	r, err := d.c.CreateBudget(ctx, &q)
	return r, mapErr(err, false)
}

// ReadBudget implements backend.BudgetDriver: the budget's definition,
// usage and limits hashes in one round trip.
func (d *Driver) ReadBudget(ctx context.Context, id model.UUID) (*backend.BudgetStatus, error) {
	if id.IsZero() {
		return nil, fmt.Errorf("%w: budget id is empty", backend.ErrInvalidInput)
	}
	k := d.c.budgetKeys(id)
	raw := d.c.Raw()
	res := raw.DoMulti(ctx, raw.B().Hgetall().Key(k.Definition()).Build(),
		raw.B().Hgetall().Key(k.Usage()).Build(), raw.B().Hgetall().Key(k.Limits()).Build())
	var maps [3]map[string]string
	for i, r := range res {
		m, err := r.AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("read budget %s: %w", id, err)
		}
		maps[i] = m
	}
	if len(maps[0]) == 0 {
		return nil, fmt.Errorf("budget %s: %w", id, backend.ErrNotFound)
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	st := &backend.BudgetStatus{BudgetID: id, ScopeType: maps[0]["scope_type"], ScopeID: maps[0]["scope_id"],
		Used: map[string]int64{}, NextResetAt: num(maps[0]["next_reset_at"]),
		BreachCount: num(maps[0]["breach_count"]), SoftBreachCount: num(maps[0]["soft_breach_count"])}
	for dim, v := range maps[1] {
		st.Used[dim] = num(v)
	}
	lim := map[string]*backend.BudgetDimension{}
	for f, v := range maps[2] {
		kind, dim, ok := strings.Cut(f, ":")
		if !ok || (kind != "hard" && kind != "soft") {
			continue
		}
		l := lim[dim]
		if l == nil {
			l = &backend.BudgetDimension{Name: dim}
			lim[dim] = l
		}
		if kind == "hard" {
			l.Hard = num(v)
		} else {
			l.Soft = num(v)
		}
	}
	for _, l := range lim {
		st.Limits = append(st.Limits, *l)
	}
	slices.SortFunc(st.Limits, func(a, b backend.BudgetDimension) int { return cmp.Compare(a.Name, b.Name) })
	return st, nil
}

// RecordSpend implements backend.BudgetDriver (ff_record_spend), after
// validating p and checking the budget exists (the library records usage
// on a budget without a definition).
func (d *Driver) RecordSpend(ctx context.Context, p *backend.ReportUsageParams) (*backend.UsageResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("record spend: %w", err)
	}
	raw := d.c.Raw()
	n, err := raw.Do(ctx, raw.B().Exists().Key(d.c.budgetKeys(p.BudgetID).Definition()).Build()).AsInt64()
	if err != nil {
		return nil, fmt.Errorf("record spend on budget %s: %w", p.BudgetID, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("budget %s: %w", p.BudgetID, backend.ErrNotFound)
	}
	q := *p
	q.NowMs = orNow(p.NowMs)
	r, err := d.c.RecordSpend(ctx, &q)
	return r, mapErr(err, false)
}

// CreateQuota implements backend.BudgetDriver (ff_create_quota_policy),
// after validating p.
func (d *Driver) CreateQuota(ctx context.Context, p *backend.CreateQuotaPolicyParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, fmt.Errorf("create quota: %w", err)
	}
	q := *p
	q.NowMs = orNow(p.NowMs)
	existed, err := d.c.CreateQuotaPolicy(ctx, &q)
	return existed, mapErr(err, false)
}

// quotaLimitFields are the definition fields of a quota's limits, in
// the order quotaLimits returns them.
var quotaLimitFields = []string{"requests_per_window_seconds", "max_requests_per_window", "active_concurrency_cap"}

// quotaLimits parses the HMGET of quotaLimitFields: window seconds, rate
// limit, concurrency cap; a missing definition is ErrNotFound.
func quotaLimits(id model.UUID, r vk.ValkeyResult) ([3]int64, error) {
	var lim [3]int64
	vals, err := r.ToArray()
	if err != nil || len(vals) != len(lim) {
		return lim, fmt.Errorf("read quota %s: %w", id, cmp.Or(err, ErrMalformedReply))
	}
	for i, v := range vals {
		s, err := v.ToString()
		if err != nil {
			return lim, fmt.Errorf("quota %s: %w", id, backend.ErrNotFound)
		}
		lim[i], _ = strconv.ParseInt(s, 10, 64)
	}
	return lim, nil
}

// ReadQuota implements backend.BudgetDriver: the quota's limits, its
// admission window and concurrency counter in one round trip.
func (d *Driver) ReadQuota(ctx context.Context, p *backend.ReadQuotaParams) (*backend.QuotaStatus, error) {
	if p.QuotaID.IsZero() {
		return nil, fmt.Errorf("%w: quota id is empty", backend.ErrInvalidInput)
	}
	k := d.c.quotaKeys(p.QuotaID)
	raw := d.c.Raw()
	res := raw.DoMulti(ctx, raw.B().Hmget().Key(k.Definition()).Field(quotaLimitFields...).Build(),
		raw.B().Zrangebyscore().Key(k.Window(backend.QuotaAdmitDimension)).Min("-inf").Max("+inf").Withscores().Build(),
		raw.B().Get().Key(k.Concurrency()).Build())
	lim, err := quotaLimits(p.QuotaID, res[0])
	if err != nil {
		return nil, err
	}
	st := &backend.QuotaStatus{QuotaID: p.QuotaID, WindowSeconds: lim[0], MaxRequestsPerWindow: lim[1], MaxConcurrent: lim[2]}
	entries, err := res[1].AsZScores()
	if err != nil {
		return nil, fmt.Errorf("read quota %s window: %w", p.QuotaID, err)
	}
	since := float64(orNow(p.NowMs) - lim[0]*1000)
	for _, e := range entries {
		if e.Score > since {
			st.InWindow++
		}
	}
	if s, err := res[2].ToString(); err == nil {
		st.Concurrent, _ = strconv.ParseInt(s, 10, 64)
	}
	return st, nil
}

// Admit implements backend.BudgetDriver: it reads the quota's limits,
// then ff_check_admission_and_record under them.
func (d *Driver) Admit(ctx context.Context, p *backend.AdmitParams) (*backend.AdmissionResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	raw := d.c.Raw()
	lim, err := quotaLimits(p.QuotaID, raw.Do(ctx, raw.B().Hmget().Key(d.c.quotaKeys(p.QuotaID).Definition()).
		Field(quotaLimitFields...).Build()))
	if err != nil {
		return nil, err
	}
	r, err := d.c.CheckAdmission(ctx, &CheckAdmissionParams{QuotaID: p.QuotaID, Dimension: backend.QuotaAdmitDimension,
		NowMs: orNow(p.NowMs), WindowSeconds: lim[0], RateLimit: lim[1], ConcurrencyCap: lim[2], ExecutionID: p.ExecutionID})
	return r, mapErr(err, false)
}

// ReleaseAdmission implements backend.BudgetDriver
// (ff_release_admission).
func (d *Driver) ReleaseAdmission(ctx context.Context, p *backend.ReleaseAdmissionParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("release admission: %w", err)
	}
	return mapErr(d.c.ReleaseAdmission(ctx, p.QuotaID, p.ExecutionID), false)
}

// ReportProgress implements backend.BudgetDriver (ff_update_progress,
// fenced by lease id and epoch).
func (d *Driver) ReportProgress(ctx context.Context, p *backend.ReportProgressParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("report progress: %w", err)
	}
	err := d.c.UpdateProgress(ctx, &UpdateProgressParams{ExecutionID: p.ExecutionID, LeaseID: p.Fence.LeaseID,
		LeaseEpoch: p.Fence.LeaseEpoch, Pct: strconv.FormatFloat(p.Pct, 'f', -1, 64), Message: p.Message})
	return mapErr(err, true)
}
