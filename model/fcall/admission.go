package fcall

import "github.com/fabric-host/fabric/model"

// QuotaWindowDefault is the window dimension FlowFabric's scheduler admits
// into (the unblock scanner and the reconciler read "requests_per_window").
const QuotaWindowDefault = "default"

// CheckAdmissionParams are the inputs of ff_check_admission_and_record.
type CheckAdmissionParams struct {
	QuotaID model.UUID
	// Partition is the quota's {q:K} partition (the driver sets it).
	Partition model.Partition
	// Dimension names the window key; "" means QuotaWindowDefault.
	Dimension      string
	NowMs          int64
	WindowSeconds  int64
	RateLimit      int64
	ConcurrencyCap int64
	ExecutionID    model.ExecutionID
	JitterMs       int64
}

// Call builds ff_check_admission_and_record, whose success reply is a
// bare status array rather than the {1, status} convention.
//
//	KEYS[1] window:<dimension>  KEYS[2] concurrency  KEYS[3] def (unused)
//	KEYS[4] admitted:<eid>  KEYS[5] admitted_set
//	ARGV[1] now_ms  ARGV[2] window_seconds  ARGV[3] rate_limit  ARGV[4] concurrency_cap
//	ARGV[5] execution_id  ARGV[6] jitter_ms
func (p *CheckAdmissionParams) Call() Call {
	k := model.QuotaKeysFor(p.Partition, p.QuotaID)
	dim := p.Dimension
	if dim == "" {
		dim = QuotaWindowDefault
	}
	return Call{Function: "ff_check_admission_and_record",
		Keys: []string{k.Window(dim), k.Concurrency(), k.Definition(), k.Admitted(p.ExecutionID), k.AdmittedSet()},
		Args: []string{itoa(p.NowMs), itoa(p.WindowSeconds), itoa(p.RateLimit), itoa(p.ConcurrencyCap),
			string(p.ExecutionID), itoa(p.JitterMs)}}
}

// ReleaseAdmissionCall builds ff_release_admission: it drops the
// admission guard and decrements the concurrency counter (floored at 0).
//
//	KEYS[1] admitted:<eid>  KEYS[2] admitted_set  KEYS[3] concurrency
//	ARGV[1] execution_id
func ReleaseAdmissionCall(quota model.QuotaKeys, eid model.ExecutionID) Call {
	return Call{Function: "ff_release_admission",
		Keys: []string{quota.Admitted(eid), quota.AdmittedSet(), quota.Concurrency()}, Args: []string{string(eid)}}
}

// ReleaseBudgetCall builds ff_release_budget: it subtracts the execution's
// recorded spend from the usage counters (clamped at 0). Its reply's
// field 0 is "released" or "noop".
//
//	KEYS[1] usage  KEYS[2] by_exec:<eid>  KEYS[3] by_exec:index
//	ARGV[1] budget_id  ARGV[2] execution_id
func ReleaseBudgetCall(budget model.BudgetKeys, budgetID string, eid model.ExecutionID) Call {
	return Call{Function: "ff_release_budget",
		Keys: []string{budget.Usage(), budget.ByExec(eid), budget.ByExecIndex()}, Args: []string{budgetID, string(eid)}}
}

// BlockForAdmissionParams are the inputs of ff_block_execution_for_admission.
type BlockForAdmissionParams struct {
	ExecutionID model.ExecutionID
	// Lane is exec_core's lane_id, pre-read.
	Lane string
	// Reason is the blocking_reason; it picks the target ZSET
	// (BlockedIndexFor).
	Reason, Detail string
	NowMs          int64
}

// Call builds ff_block_execution_for_admission.
//
//	KEYS[1] exec_core  KEYS[2] lane eligible  KEYS[3] target blocked ZSET
//	ARGV[1] execution_id  ARGV[2] blocking_reason  ARGV[3] blocking_detail  ARGV[4] now_ms
func (p *BlockForAdmissionParams) Call() Call {
	pk := model.KeysOn(p.ExecutionID.Partition())
	return Call{Function: "ff_block_execution_for_admission",
		Keys: []string{model.KeysFor(p.ExecutionID).Core(), pk.LaneEligible(p.Lane), BlockedIndexFor(pk, p.Lane, p.Reason)},
		Args: []string{string(p.ExecutionID), p.Reason, p.Detail, itoa(p.NowMs)}}
}
