package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// BudgetDimension is one limited dimension of a budget: its name and its
// hard and soft limits. backend.BudgetDimension is this type.
type BudgetDimension struct {
	Name string
	Hard int64
	Soft int64
}

// CreateBudgetParams are the inputs of ff_create_budget.
type CreateBudgetParams struct {
	// Partition is the budget's {b:M} partition (the driver sets it).
	Partition       model.Partition
	BudgetID        model.UUID
	ScopeType       string
	ScopeID         string
	EnforcementMode string
	OnHardLimit     string
	OnSoftLimit     string
	// ResetIntervalMs > 0 schedules periodic resets.
	ResetIntervalMs int64
	NowMs           int64
	Dimensions      []BudgetDimension
}

// Call builds ff_create_budget.
//
//	KEYS[1] def  KEYS[2] limits  KEYS[3] usage  KEYS[4] ff:idx:{b:M}:budget_resets
//	KEYS[5] ff:idx:{b:M}:budget_policies
//	ARGV[1] budget_id  ARGV[2] scope_type  ARGV[3] scope_id  ARGV[4] enforcement_mode
//	ARGV[5] on_hard_limit  ARGV[6] on_soft_limit  ARGV[7] reset_interval_ms  ARGV[8] now_ms
//	ARGV[9] D, then D names, D hard limits, D soft limits
func (p *CreateBudgetParams) Call() Call {
	k := model.BudgetKeysFor(p.Partition, p.BudgetID)
	args := make([]string, 0, 9+3*len(p.Dimensions))
	args = append(args, p.BudgetID.String(), p.ScopeType, p.ScopeID, p.EnforcementMode,
		p.OnHardLimit, p.OnSoftLimit, itoa(p.ResetIntervalMs), itoa(p.NowMs), strconv.Itoa(len(p.Dimensions)))
	for _, d := range p.Dimensions {
		args = append(args, d.Name)
	}
	for _, d := range p.Dimensions {
		args = append(args, itoa(d.Hard))
	}
	for _, d := range p.Dimensions {
		args = append(args, itoa(d.Soft))
	}
	return Call{Function: "ff_create_budget",
		Keys: []string{k.Definition(), k.Limits(), k.Usage(), k.Resets(), k.Policies()},
		Args: args}
}

// DecodeCreateBudget reads ff_create_budget's reply: the budget's id, and
// whether it existed already (StatusAlreadySatisfied: nothing changed).
func DecodeCreateBudget(r *Reply) (budgetID string, existed bool) {
	return r.Field(0), r.Status == StatusAlreadySatisfied
}

// UsageDelta is one dimension's increment. backend.UsageDelta is this
// type.
type UsageDelta struct {
	Dimension string
	Delta     int64
}

// UsageParams are the inputs of ff_report_usage_and_check (ReportUsage)
// and ff_record_spend (RecordSpend).
type UsageParams struct {
	// Partition is the budget's {b:M} partition (the driver sets it).
	Partition model.Partition
	BudgetID  model.UUID
	Deltas    []UsageDelta
	NowMs     int64
	// DedupID, when set, makes the report idempotent: its dedup key is
	// sent ("" sends none).
	DedupID string
	// ExecutionID is the execution RecordSpend's ledger attributes the
	// spend to (ReportUsage does not send it).
	ExecutionID model.ExecutionID
}

func (p *UsageParams) keys() (model.BudgetKeys, string) {
	k := model.BudgetKeysFor(p.Partition, p.BudgetID)
	dedup := ""
	if p.DedupID != "" {
		dedup = k.UsageDedup(p.DedupID)
	}
	return k, dedup
}

// ReportUsage builds ff_report_usage_and_check. Hard limits are checked
// for every dimension before any increment.
//
//	KEYS[1] usage  KEYS[2] limits  KEYS[3] def
//	ARGV[1] D, ARGV[2..D+1] names, ARGV[D+2..2D+1] deltas, ARGV[2D+2] now_ms,
//	ARGV[2D+3] dedup key (full key or "")
func (p *UsageParams) ReportUsage() Call {
	k, dedup := p.keys()
	args := make([]string, 0, 3+2*len(p.Deltas))
	args = append(args, strconv.Itoa(len(p.Deltas)))
	for _, d := range p.Deltas {
		args = append(args, d.Dimension)
	}
	for _, d := range p.Deltas {
		args = append(args, itoa(d.Delta))
	}
	args = append(args, itoa(p.NowMs), dedup)
	return Call{Function: "ff_report_usage_and_check", Keys: []string{k.Usage(), k.Limits(), k.Definition()}, Args: args}
}

// RecordSpend builds ff_record_spend: ReportUsage plus a per-execution
// ledger that ff_release_budget can reverse.
//
//	KEYS[1] usage  KEYS[2] limits  KEYS[3] def  KEYS[4] by_exec:<eid>  KEYS[5] by_exec:index
//	ARGV[1] P, then P (dim, delta) pairs, then now_ms, dedup key, execution_id
func (p *UsageParams) RecordSpend() Call {
	k, dedup := p.keys()
	args := make([]string, 0, 4+2*len(p.Deltas))
	args = append(args, strconv.Itoa(len(p.Deltas)))
	for _, d := range p.Deltas {
		args = append(args, d.Dimension, itoa(d.Delta))
	}
	args = append(args, itoa(p.NowMs), dedup, string(p.ExecutionID))
	return Call{Function: "ff_record_spend",
		Keys: []string{k.Usage(), k.Limits(), k.Definition(), k.ByExec(p.ExecutionID), k.ByExecIndex()},
		Args: args}
}

// UsageResult is the reply of ff_report_usage_and_check and
// ff_record_spend. backend.UsageResult is this type.
type UsageResult struct {
	// Status is OK, HARD_BREACH, SOFT_BREACH or ALREADY_APPLIED.
	Status string
	// Dimension, Current and Limit describe a breach: for a hard breach
	// Current is the usage before the rejected report; for a soft breach
	// it is the usage after the increment.
	Dimension string
	Current   string
	Limit     string
}

// DecodeUsage reads the reply of ff_report_usage_and_check and
// ff_record_spend.
func DecodeUsage(r *Reply) *UsageResult {
	return &UsageResult{Status: r.Status, Dimension: r.Field(0), Current: r.Field(1), Limit: r.Field(2)}
}

// CreateQuotaPolicyParams are the inputs of ff_create_quota_policy.
type CreateQuotaPolicyParams struct {
	// Partition is the quota's {q:K} partition (the driver sets it).
	Partition            model.Partition
	QuotaID              model.UUID
	WindowSeconds        int64
	MaxRequestsPerWindow int64
	MaxConcurrent        int64
	NowMs                int64
}

// Call builds ff_create_quota_policy.
//
//	KEYS[1] def  KEYS[2] window:requests_per_window (unused)  KEYS[3] concurrency
//	KEYS[4] admitted_set (unused)  KEYS[5] ff:idx:{q:K}:quota_policies
//	ARGV[1] quota_policy_id  ARGV[2] window_seconds  ARGV[3] max_requests_per_window
//	ARGV[4] max_concurrent  ARGV[5] now_ms
func (p *CreateQuotaPolicyParams) Call() Call {
	k := model.QuotaKeysFor(p.Partition, p.QuotaID)
	return Call{Function: "ff_create_quota_policy",
		Keys: []string{k.Definition(), k.Window("requests_per_window"), k.Concurrency(), k.AdmittedSet(), k.Policies()},
		Args: []string{p.QuotaID.String(), itoa(p.WindowSeconds), itoa(p.MaxRequestsPerWindow),
			itoa(p.MaxConcurrent), itoa(p.NowMs)}}
}

// DecodeCreateQuotaPolicy reads ff_create_quota_policy's reply: whether
// the policy existed already (StatusAlreadySatisfied).
func DecodeCreateQuotaPolicy(r *Reply) (existed bool) { return r.Status == StatusAlreadySatisfied }
