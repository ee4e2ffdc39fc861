package valkey

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// Budget statuses returned by ReportUsage and RecordSpend (package
// backend's).
const (
	BudgetOK             = backend.BudgetOK
	BudgetHardBreach     = backend.BudgetHardBreach
	BudgetSoftBreach     = backend.BudgetSoftBreach
	BudgetAlreadyApplied = backend.BudgetAlreadyApplied
)

// BudgetDimension is one limited dimension of a budget (package
// backend's).
type BudgetDimension = backend.BudgetDimension

// CreateBudgetParams are the inputs of CreateBudget (package backend's).
type CreateBudgetParams = backend.CreateBudgetParams

// CreateBudgetResult is CreateBudget's reply (package backend's).
type CreateBudgetResult = backend.CreateBudgetResult

func (c *Client) budgetKeys(id model.UUID) model.BudgetKeys {
	return model.BudgetKeysFor(c.parts.BudgetPartition(id), id)
}

// CreateBudget calls ff_create_budget (fcall.CreateBudgetParams) on the
// budget's partition.
func (c *Client) CreateBudget(ctx context.Context, p *CreateBudgetParams) (*CreateBudgetResult, error) {
	q := *p
	q.Partition = c.parts.BudgetPartition(p.BudgetID)
	call := q.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("create budget %s: %w", p.BudgetID, err)
	}
	id, existed := fcall.DecodeCreateBudget(rep)
	return &CreateBudgetResult{BudgetID: id, AlreadyExisted: existed}, nil
}

// UsageDelta is one dimension's increment (package backend's).
type UsageDelta = backend.UsageDelta

// ReportUsageParams are the inputs of ReportUsage and RecordSpend
// (package backend's).
type ReportUsageParams = backend.ReportUsageParams

// UsageResult is the reply of ReportUsage and RecordSpend (package
// backend's).
type UsageResult = backend.UsageResult

// usageParams is p as fcall lays it out, on the budget's partition.
func (c *Client) usageParams(p *ReportUsageParams) *fcall.UsageParams {
	return &fcall.UsageParams{Partition: c.parts.BudgetPartition(p.BudgetID), BudgetID: p.BudgetID, Deltas: p.Deltas,
		NowMs: p.NowMs, DedupID: p.DedupID, ExecutionID: p.ExecutionID}
}

// ReportUsage calls ff_report_usage_and_check (fcall.UsageParams.ReportUsage).
// Hard limits are checked for every dimension before any increment.
func (c *Client) ReportUsage(ctx context.Context, p *ReportUsageParams) (*UsageResult, error) {
	call := c.usageParams(p).ReportUsage()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("report usage on budget %s: %w", p.BudgetID, err)
	}
	return fcall.DecodeUsage(rep), nil
}

// RecordSpend calls ff_record_spend (fcall.UsageParams.RecordSpend):
// ReportUsage plus a per-execution ledger that ReleaseBudget can reverse.
func (c *Client) RecordSpend(ctx context.Context, p *ReportUsageParams) (*UsageResult, error) {
	call := c.usageParams(p).RecordSpend()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("record spend on budget %s: %w", p.BudgetID, err)
	}
	return fcall.DecodeUsage(rep), nil
}

// ReleaseBudget calls ff_release_budget: it subtracts the execution's
// recorded spend from the usage counters (clamped at 0). It returns
// "released" or "noop".
//
//	KEYS[1] usage  KEYS[2] by_exec:<eid>  KEYS[3] by_exec:index
//	ARGV[1] budget_id  ARGV[2] execution_id
func (c *Client) ReleaseBudget(ctx context.Context, budget model.UUID, eid model.ExecutionID) (string, error) {
	call := fcall.ReleaseBudgetCall(c.budgetKeys(budget), budget.String(), eid)
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return "", fmt.Errorf("release budget %s for %s: %w", budget, eid, err)
	}
	return rep.Field(0), nil
}

// ResetBudget calls ff_reset_budget and returns next_reset_at (0 when the
// budget has no reset interval).
//
//	KEYS[1] def  KEYS[2] usage  KEYS[3] ff:idx:{b:M}:budget_resets
//	ARGV[1] budget_id  ARGV[2] now_ms
func (c *Client) ResetBudget(ctx context.Context, budget model.UUID, nowMs int64) (int64, error) {
	call := (&fcall.ResetBudgetParams{Partition: c.parts.BudgetPartition(budget), BudgetID: budget.String(),
		NowMs: nowMs}).Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return 0, fmt.Errorf("reset budget %s: %w", budget, err)
	}
	return fcall.DecodeResetBudget(rep)
}

// BlockedIndexFor returns the blocked ZSET an admission block with reason
// lands in (and the unblock scanner reads); see fcall.BlockedIndexFor.
func BlockedIndexFor(pk model.PartitionKeys, lane, reason string) string {
	return fcall.BlockedIndexFor(pk, lane, reason)
}

// famCoreFields pre-reads exec_core's lane_id (and optional extra fields).
func (c *Client) famCoreFields(ctx context.Context, eid model.ExecutionID, fields ...string) ([]string, error) {
	vals, err := c.c.Do(ctx, c.c.B().Hmget().Key(model.KeysFor(eid).Core()).Field(fields...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("read %s core: %w", eid, err)
	}
	out := make([]string, len(fields))
	for i := range fields {
		if i < len(vals) {
			out[i], _ = vals[i].ToString()
		}
	}
	return out, nil
}

func famLane(lane string) string {
	if lane == "" {
		return "default"
	}
	return lane
}

// UnblockExecution calls ff_unblock_execution. It pre-reads lane_id and
// blocking_reason; the source blocked ZSET follows ExpectedReason, or the
// stored blocking_reason when ExpectedReason is "".
//
//	KEYS[1] exec_core  KEYS[2] source blocked ZSET  KEYS[3] lane eligible
//	ARGV[1] execution_id  ARGV[2] now_ms  ARGV[3] expected blocking_reason ("" = any)
func (c *Client) UnblockExecution(ctx context.Context, eid model.ExecutionID, nowMs int64, expectedReason string) error {
	f, err := c.famCoreFields(ctx, eid, "lane_id", "blocking_reason")
	if err != nil {
		return err
	}
	lane, reason := famLane(f[0]), f[1]
	if expectedReason != "" {
		reason = expectedReason
	}
	call := (&fcall.UnblockExecutionParams{ExecutionID: eid, Lane: lane, BlockingReason: reason,
		ExpectedReason: expectedReason, NowMs: nowMs}).Call()
	if _, err := c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return fmt.Errorf("unblock %s: %w", eid, err)
	}
	return nil
}

// BlockExecutionForAdmission calls ff_block_execution_for_admission. It
// pre-reads lane_id; the target ZSET follows BlockedIndexFor(reason).
//
//	KEYS[1] exec_core  KEYS[2] lane eligible  KEYS[3] target blocked ZSET
//	ARGV[1] execution_id  ARGV[2] blocking_reason  ARGV[3] blocking_detail  ARGV[4] now_ms
func (c *Client) BlockExecutionForAdmission(ctx context.Context, eid model.ExecutionID, reason, detail string, nowMs int64) error {
	f, err := c.famCoreFields(ctx, eid, "lane_id")
	if err != nil {
		return err
	}
	call := (&fcall.BlockForAdmissionParams{ExecutionID: eid, Lane: famLane(f[0]), Reason: reason, Detail: detail,
		NowMs: nowMs}).Call()
	if _, err := c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return fmt.Errorf("block %s for admission: %w", eid, err)
	}
	return nil
}
