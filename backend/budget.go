package backend

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// BudgetDriver is the part of Driver for budgets, quotas and progress
// reports: creating a budget, recording spend against it and reading its
// usage; creating a quota, taking and giving back a slot of it and
// reading its usage; recording an attempt's progress. Both drivers
// implement it; backendtest runs each operation on both.
//
// A call whose parameters fail validation (ErrInvalidInput) writes
// nothing. A budget or quota that does not exist is ErrNotFound (but
// see ReleaseAdmission).
type BudgetDriver interface {
	// CreateBudget creates a budget with its limits per dimension. An
	// existing id changes nothing and reports AlreadyExisted.
	CreateBudget(ctx context.Context, p *CreateBudgetParams) (*CreateBudgetResult, error)
	// ReadBudget reads a budget's limits, usage and reset schedule.
	ReadBudget(ctx context.Context, id model.UUID) (*BudgetStatus, error)
	// RecordSpend adds usage to a budget, attributed to an execution
	// (ff_record_spend): every hard limit is checked before anything is
	// added (a report that would pass one adds nothing and is
	// BudgetHardBreach, counted as a breach); a report passing a soft
	// limit is added and BudgetSoftBreach; a repeat of a DedupID within
	// 24 h adds nothing and is BudgetAlreadyApplied.
	RecordSpend(ctx context.Context, p *ReportUsageParams) (*UsageResult, error)

	// CreateQuota creates a quota policy (a sliding window of admissions
	// and a concurrency bound) and reports whether it already existed
	// (an existing id changes nothing).
	CreateQuota(ctx context.Context, p *CreateQuotaPolicyParams) (existed bool, err error)
	// ReadQuota reads a quota's limits and what is taken of them at
	// NowMs.
	ReadQuota(ctx context.Context, p *ReadQuotaParams) (*QuotaStatus, error)
	// Admit takes a slot of a quota for an execution under the limits
	// stored with it (ff_check_admission_and_record in the window
	// QuotaAdmitDimension): a repeat while the execution's admission
	// guard holds (one window) is AdmissionAlreadyAdmitted and counts
	// nothing; a full window is AdmissionRateExceeded with the wait until
	// a slot frees; a full concurrency bound AdmissionConcurrencyExceeded.
	Admit(ctx context.Context, p *AdmitParams) (*AdmissionResult, error)
	// ReleaseAdmission drops an execution's admission guard and gives a
	// concurrency slot back (floored at 0), as ff_release_admission does
	// (call it once per admission). A quota that does not exist changes
	// nothing.
	ReleaseAdmission(ctx context.Context, p *ReleaseAdmissionParams) error

	// ReportProgress records the fenced attempt's progress on its
	// execution (progress_pct, progress_message, progress_updated_at). A
	// fence that no longer holds the lease is ErrLeaseGone.
	ReportProgress(ctx context.Context, p *ReportProgressParams) error
}

// Budget statuses (UsageResult.Status), the flowfabric library's.
const (
	BudgetOK             = "OK"
	BudgetHardBreach     = "HARD_BREACH"
	BudgetSoftBreach     = "SOFT_BREACH"
	BudgetAlreadyApplied = "ALREADY_APPLIED"
)

// BudgetMaxDimensions bounds a budget's dimensions (FlowFabric's cap).
const BudgetMaxDimensions = 64

// BudgetDedupTTLMs is how long a RecordSpend DedupID holds (24 h).
const BudgetDedupTTLMs = 86_400_000

// BudgetDimension is one limited dimension of a budget: Name, Hard and
// Soft. A limit <= 0 means no limit. It is fcall.BudgetDimension, the
// type ff_create_budget's layout sends.
type BudgetDimension = fcall.BudgetDimension

// CreateBudgetParams are the inputs of BudgetDriver.CreateBudget: the
// parameters of ff_create_budget, one type for the contract and the call
// layout (fcall.CreateBudgetParams). ResetIntervalMs > 0 schedules
// periodic resets (the budget_reset reconcilers zero the usage every
// interval); NowMs is the caller's clock, stored as created_at, 0 meaning
// the driver's. Partition is set by the Valkey driver and unused by
// Postgres: callers leave it zero.
type CreateBudgetParams = fcall.CreateBudgetParams

// validDimension reports whether name can name a budget dimension: not
// empty, without ':' (Valkey's limits hash joins "hard:<name>") or NUL.
func validDimension(name string) bool { return name != "" && !strings.ContainsAny(name, ":\x00") }

// ValidateCreateBudget checks p as both drivers do before writing
// anything: an id, 1..BudgetMaxDimensions distinct valid dimensions,
// limits not negative, a soft limit not above its hard one, a reset
// interval not negative.
func ValidateCreateBudget(p *CreateBudgetParams) error {
	switch {
	case p.BudgetID.IsZero():
		return fmt.Errorf("%w: budget id is empty", ErrInvalidInput)
	case len(p.Dimensions) == 0 || len(p.Dimensions) > BudgetMaxDimensions:
		return fmt.Errorf("%w: a budget has 1..%d dimensions, got %d", ErrInvalidInput, BudgetMaxDimensions, len(p.Dimensions))
	case p.ResetIntervalMs < 0:
		return fmt.Errorf("%w: reset interval %d ms is negative", ErrInvalidInput, p.ResetIntervalMs)
	}
	seen := map[string]bool{}
	for _, d := range p.Dimensions {
		switch {
		case !validDimension(d.Name):
			return fmt.Errorf("%w: dimension %q: names must be non-empty without ':'", ErrInvalidInput, d.Name)
		case seen[d.Name]:
			return fmt.Errorf("%w: dimension %q given twice", ErrInvalidInput, d.Name)
		case d.Hard < 0 || d.Soft < 0:
			return fmt.Errorf("%w: dimension %q: limits must not be negative", ErrInvalidInput, d.Name)
		case d.Hard > 0 && d.Soft > d.Hard:
			return fmt.Errorf("%w: dimension %q: soft limit %d exceeds hard limit %d", ErrInvalidInput, d.Name, d.Soft, d.Hard)
		}
		seen[d.Name] = true
	}
	return nil
}

// CreateBudgetResult is the outcome of CreateBudget.
type CreateBudgetResult struct {
	BudgetID string
	// AlreadyExisted: the budget existed; nothing changed.
	AlreadyExisted bool
}

// BudgetStatus is a budget as ReadBudget reads it.
type BudgetStatus struct {
	BudgetID           model.UUID
	ScopeType, ScopeID string
	// Limits are the limited dimensions, sorted by name.
	Limits []BudgetDimension
	// Used maps each dimension that has usage to its total.
	Used map[string]int64
	// NextResetAt is when the usage is next zeroed (0: never).
	NextResetAt int64
	// BreachCount and SoftBreachCount count hard and soft breaches.
	BreachCount, SoftBreachCount int64
}

// UsageDelta is one dimension's increment: Dimension and Delta. It is
// fcall.UsageDelta, the type ff_report_usage_and_check's and
// ff_record_spend's layouts send.
type UsageDelta = fcall.UsageDelta

// ReportUsageParams are the inputs of BudgetDriver.RecordSpend (and of
// the Valkey client's ff_report_usage_and_check and ff_record_spend
// calls).
type ReportUsageParams struct {
	BudgetID model.UUID
	Deltas   []UsageDelta
	// NowMs is the caller's clock; 0 means the driver's clock.
	NowMs int64
	// DedupID, when set, makes the report idempotent for 24 h (on Valkey
	// the key ff:usagededup:{b:M}:<DedupID>, on Postgres the
	// ff_budget_usage_dedup row of the budget partition).
	DedupID string
	// ExecutionID attributes the spend to an execution (a ledger
	// ff_release_budget can reverse); empty attributes it to none.
	ExecutionID model.ExecutionID
}

// Validate checks p as both drivers do before writing anything: a budget
// id, 1..BudgetMaxDimensions distinct valid dimensions, deltas not
// negative, an execution id that parses when set.
func (p *ReportUsageParams) Validate() error {
	switch {
	case p.BudgetID.IsZero():
		return fmt.Errorf("%w: budget id is empty", ErrInvalidInput)
	case len(p.Deltas) == 0 || len(p.Deltas) > BudgetMaxDimensions:
		return fmt.Errorf("%w: a report has 1..%d dimensions, got %d", ErrInvalidInput, BudgetMaxDimensions, len(p.Deltas))
	}
	if p.ExecutionID != "" {
		if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidInput, err)
		}
	}
	seen := map[string]bool{}
	for _, d := range p.Deltas {
		switch {
		case !validDimension(d.Dimension):
			return fmt.Errorf("%w: dimension %q: names must be non-empty without ':'", ErrInvalidInput, d.Dimension)
		case seen[d.Dimension]:
			return fmt.Errorf("%w: dimension %q given twice", ErrInvalidInput, d.Dimension)
		case d.Delta < 0:
			return fmt.Errorf("%w: dimension %q: amount %d is negative", ErrInvalidInput, d.Dimension, d.Delta)
		}
		seen[d.Dimension] = true
	}
	return nil
}

// UsageResult is the outcome of a usage report: Status (BudgetOK,
// BudgetHardBreach, BudgetSoftBreach or BudgetAlreadyApplied) and, for a
// breach, Dimension, Current and Limit. It is fcall.UsageResult, what
// fcall.DecodeUsage reads on Valkey; the Postgres driver fills it too.
type UsageResult = fcall.UsageResult

// Admission statuses (AdmissionResult.Status), the flowfabric library's.
const (
	AdmissionAdmitted            = "ADMITTED"
	AdmissionAlreadyAdmitted     = "ALREADY_ADMITTED"
	AdmissionRateExceeded        = "RATE_EXCEEDED"
	AdmissionConcurrencyExceeded = "CONCURRENCY_EXCEEDED"
)

// QuotaAdmitDimension is the window Admit records admissions in: the one
// FlowFabric's unblock scanner and quota reconciler read on Valkey.
const QuotaAdmitDimension = "requests_per_window"

// CreateQuotaPolicyParams are the inputs of BudgetDriver.CreateQuota (and
// of the Valkey client's ff_create_quota_policy call).
type CreateQuotaPolicyParams struct {
	QuotaID              model.UUID
	WindowSeconds        int64
	MaxRequestsPerWindow int64
	MaxConcurrent        int64
	// NowMs is the caller's clock; 0 means the driver's clock.
	NowMs int64
}

// Validate checks p as both drivers do before writing anything: an id, a
// window of at least a second, limits not negative and at least one set.
func (p *CreateQuotaPolicyParams) Validate() error {
	switch {
	case p.QuotaID.IsZero():
		return fmt.Errorf("%w: quota id is empty", ErrInvalidInput)
	case p.WindowSeconds < 1 || p.WindowSeconds > math.MaxInt64/1000:
		return fmt.Errorf("%w: window %d s: at least 1 s", ErrInvalidInput, p.WindowSeconds)
	case p.MaxRequestsPerWindow < 0 || p.MaxConcurrent < 0:
		return fmt.Errorf("%w: quota limits must not be negative", ErrInvalidInput)
	case p.MaxRequestsPerWindow == 0 && p.MaxConcurrent == 0:
		return fmt.Errorf("%w: a quota needs a rate limit, a concurrency bound or both", ErrInvalidInput)
	}
	return nil
}

// ReadQuotaParams are the inputs of BudgetDriver.ReadQuota.
type ReadQuotaParams struct {
	QuotaID model.UUID
	// NowMs is the time the window is counted at; 0 means the driver's
	// clock.
	NowMs int64
}

// QuotaStatus is a quota as ReadQuota reads it.
type QuotaStatus struct {
	QuotaID              model.UUID
	WindowSeconds        int64
	MaxRequestsPerWindow int64
	MaxConcurrent        int64
	// InWindow counts admissions in the window ending at NowMs;
	// Concurrent the concurrency slots held.
	InWindow, Concurrent int64
}

// AdmitParams are the inputs of BudgetDriver.Admit.
type AdmitParams struct {
	QuotaID     model.UUID
	ExecutionID model.ExecutionID
	// NowMs is the caller's clock; 0 means the driver's clock.
	NowMs int64
}

// Validate checks p: a quota id and an execution id that parses.
func (p *AdmitParams) Validate() error { return validQuotaExec(p.QuotaID, p.ExecutionID) }

func validQuotaExec(q model.UUID, id model.ExecutionID) error {
	if q.IsZero() {
		return fmt.Errorf("%w: quota id is empty", ErrInvalidInput)
	}
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	return nil
}

// AdmissionResult is the outcome of an admission check.
type AdmissionResult struct {
	// Status is one of the Admission* constants.
	Status string
	// RetryAfterMs is set with AdmissionRateExceeded.
	RetryAfterMs int64
}

// ReleaseAdmissionParams are the inputs of BudgetDriver.ReleaseAdmission.
type ReleaseAdmissionParams struct {
	QuotaID     model.UUID
	ExecutionID model.ExecutionID
}

// Validate checks p: a quota id and an execution id that parses.
func (p *ReleaseAdmissionParams) Validate() error { return validQuotaExec(p.QuotaID, p.ExecutionID) }

// ProgressMessageMaxBytes bounds a progress message.
const ProgressMessageMaxBytes = 1024

// ReportProgressParams are the inputs of BudgetDriver.ReportProgress.
type ReportProgressParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	// Pct is in 0..100.
	Pct float64
	// Message is stored when not empty (at most ProgressMessageMaxBytes).
	Message string
}

// Validate checks p: pct in 0..100, a message within bounds, an
// execution id that parses.
func (p *ReportProgressParams) Validate() error {
	if math.IsNaN(p.Pct) || p.Pct < 0 || p.Pct > 100 {
		return fmt.Errorf("%w: progress %v is out of range 0..100", ErrInvalidInput, p.Pct)
	}
	if len(p.Message) > ProgressMessageMaxBytes {
		return fmt.Errorf("%w: progress message of %d bytes exceeds %d", ErrInvalidInput, len(p.Message), ProgressMessageMaxBytes)
	}
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	return nil
}
