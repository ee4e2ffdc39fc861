package sdk

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// ProgressMessageMaxBytes bounds a progress message.
const ProgressMessageMaxBytes = backend.ProgressMessageMaxBytes

// ReportProgress records how far the attempt got (ff_update_progress on
// Valkey, ff_exec_core.raw_fields on Postgres): pct in 0..100 and an
// optional message, stored on the execution (progress_pct,
// progress_message, progress_updated_at) for operators and clients. It
// checks the lease and does not end it.
func (l *Lease) ReportProgress(ctx context.Context, pct float64, message string) error {
	if math.IsNaN(pct) || pct < 0 || pct > 100 {
		return invalid("progress.pct", "%v is out of range 0..100", pct)
	}
	if len(message) > ProgressMessageMaxBytes {
		return invalid("progress.message", "%d bytes exceed %d", len(message), ProgressMessageMaxBytes)
	}
	err := l.w.drv.ReportProgress(ctx, &backend.ReportProgressParams{ExecutionID: l.ID, Fence: l.fence, Pct: pct, Message: message})
	if err != nil {
		return fmt.Errorf("sdk: report progress of %s: %w", l.ID, err)
	}
	return nil
}

// ReportProgress records progress (see Lease.ReportProgress).
func (j *Job) ReportProgress(ctx context.Context, pct float64, message string) error {
	return j.lease.ReportProgress(ctx, pct, message)
}

// UsageReport is what a budget said to reported usage.
type UsageReport struct {
	// Exceeded: a hard limit would be passed, so nothing was added; the
	// handler should stop spending (return an error or Permanent).
	Exceeded bool
	// SoftBreach: the usage was added and passed a soft limit.
	SoftBreach bool
	// Duplicate: a report with the same key was already applied.
	Duplicate bool
	// Dimension, Current and Limit describe a breach.
	Dimension, Current, Limit string
}

// ReportUsage adds usage (dimension → non-negative amount, e.g.
// {"tokens": 1200, "usd_micros": 350}) to budget, attributed to this
// execution so it can be released later (ff_record_spend on Valkey,
// ff_budget_usage and ff_budget_usage_by_exec on Postgres). Hard limits
// are checked for every dimension before anything is added. key, when
// not empty, makes the report idempotent for 24 h (retries of the same
// step do not count twice). A budget that does not exist returns an
// error wrapping ErrNotFound; a dimension name with ':' is invalid input.
func (l *Lease) ReportUsage(ctx context.Context, budget model.UUID, usage map[string]int64, key string) (*UsageReport, error) {
	if len(usage) == 0 {
		return nil, invalid("usage", "at least one dimension is required")
	}
	dims := make([]string, 0, len(usage))
	for d, v := range usage {
		if d == "" {
			return nil, invalid("usage", "dimension names must not be empty")
		}
		if v < 0 {
			return nil, invalid("usage", "%s: amount %d is negative", d, v)
		}
		dims = append(dims, d)
	}
	slices.Sort(dims)
	deltas := make([]backend.UsageDelta, len(dims))
	for i, d := range dims {
		deltas[i] = backend.UsageDelta{Dimension: d, Delta: usage[d]}
	}
	dedup := ""
	if key != "" {
		dedup = string(l.ID) + ":" + key
	}
	res, err := l.w.drv.RecordSpend(ctx, &backend.ReportUsageParams{BudgetID: budget, Deltas: deltas,
		NowMs: l.w.cfg.Clock().UnixMilli(), DedupID: dedup, ExecutionID: l.ID})
	if err != nil {
		return nil, fmt.Errorf("sdk: report usage of %s to budget %s: %w", l.ID, budget, sdkErr(err))
	}
	return &UsageReport{Exceeded: res.Status == backend.BudgetHardBreach, SoftBreach: res.Status == backend.BudgetSoftBreach,
		Duplicate: res.Status == backend.BudgetAlreadyApplied, Dimension: res.Dimension, Current: res.Current, Limit: res.Limit}, nil
}

// ReportUsage reports budget usage (see Lease.ReportUsage).
func (j *Job) ReportUsage(ctx context.Context, budget model.UUID, usage map[string]int64, key string) (*UsageReport, error) {
	return j.lease.ReportUsage(ctx, budget, usage, key)
}
