package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// DefaultDedupTTLMs is the create-idempotency window FlowFabric uses when
// an idempotency key is given and no window (24 h).
const DefaultDedupTTLMs = 24 * 60 * 60 * 1000

// StatusDuplicate is ff_create_execution's status for an execution that
// already exists (by id or by idempotency key).
const StatusDuplicate = "DUPLICATE"

// Duration is the type of a window a caller states in its own unit:
// time.Duration on the host side, Millis in a plugin (which then does not
// link package time).
type Duration interface {
	~int64
	// Milliseconds is the window in whole milliseconds.
	Milliseconds() int64
}

// Millis is a Duration in milliseconds.
type Millis int64

// Milliseconds returns m.
func (m Millis) Milliseconds() int64 { return int64(m) }

// CreateExecutionParams are the inputs of ff_create_execution, with the
// idempotency window in D (time.Duration or Millis). The caller mints
// ExecutionID; nothing here generates ids.
type CreateExecutionParams[D Duration] struct {
	ExecutionID     model.ExecutionID
	Namespace       string
	LaneID          string
	ExecutionKind   string
	Priority        int
	CreatorIdentity string
	// PolicyJSON is the ExecutionPolicy document; "" sends "{}".
	PolicyJSON string
	// Payload is the opaque input payload; empty stores nothing.
	Payload string
	// DelayUntil, in server ms, delays the first claim; 0 means none.
	DelayUntil int64
	// IdempotencyKey makes the create idempotent within its partition for
	// DedupTTL (DefaultDedupTTLMs when not positive).
	IdempotencyKey string
	DedupTTL       D
	// Tags are written to the tags hash.
	Tags map[string]string
	// ExecutionDeadlineAt, in server ms, indexes an absolute deadline; 0
	// means none.
	ExecutionDeadlineAt int64
}

// Call builds ff_create_execution.
//
//	KEYS[1] exec_core          KEYS[5] lane eligible (or delayed when DelayUntil>0)
//	KEYS[2] payload            KEYS[6] idempotency key (or ff:noop:{fp:N})
//	KEYS[3] policy             KEYS[7] execution_deadline
//	KEYS[4] tags               KEYS[8] all_executions
//	ARGV[1] execution_id  ARGV[2] namespace  ARGV[3] lane_id  ARGV[4] execution_kind
//	ARGV[5] priority  ARGV[6] creator_identity  ARGV[7] policy_json  ARGV[8] payload
//	ARGV[9] delay_until|""  ARGV[10] dedup_ttl_ms|""  ARGV[11] tags_json
//	ARGV[12] execution_deadline_at|""  ARGV[13] partition index
func (p *CreateExecutionParams[D]) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	part := k.Partition()
	pk := model.KeysOn(part)
	sched := pk.LaneEligible(p.LaneID)
	if p.DelayUntil > 0 {
		sched = pk.LaneDelayed(p.LaneID)
	}
	idem, ttl := pk.Noop(), ""
	if p.IdempotencyKey != "" {
		idem = pk.Idempotency(p.Namespace, p.IdempotencyKey)
		d := int64(DefaultDedupTTLMs)
		if p.DedupTTL > 0 {
			d = p.DedupTTL.Milliseconds()
		}
		ttl = itoa(d)
	}
	return Call{
		Function: "ff_create_execution",
		Keys: []string{k.Core(), k.Payload(), k.Policy(), k.Tags(), sched, idem,
			pk.ExecutionDeadline(), pk.AllExecutions()},
		Args: []string{string(p.ExecutionID), p.Namespace, p.LaneID, p.ExecutionKind,
			strconv.Itoa(p.Priority), p.CreatorIdentity, jsonOrEmptyObject(p.PolicyJSON), p.Payload,
			msOrEmpty(p.DelayUntil), ttl, TagsJSON(p.Tags), msOrEmpty(p.ExecutionDeadlineAt),
			strconv.FormatUint(uint64(part.Index), 10)},
	}
}

// CreateExecutionResult is the reply of ff_create_execution.
type CreateExecutionResult struct {
	// ExecutionID is the created id, or on a duplicate the id stored under
	// the idempotency key (which may differ from the one sent).
	ExecutionID model.ExecutionID
	// PublicState is "waiting" or "delayed"; empty on a duplicate.
	PublicState string
	// Duplicate reports that nothing was created.
	Duplicate bool
}

// DecodeCreateExecution reads ff_create_execution's reply.
func DecodeCreateExecution(r *Reply) *CreateExecutionResult {
	res := &CreateExecutionResult{ExecutionID: model.ExecutionID(r.Field(0))}
	if r.Status == StatusDuplicate {
		res.Duplicate = true
		return res
	}
	res.PublicState = r.Field(1)
	return res
}

// SourceOperatorOverride is the source that lets an empty fence through
// complete, fail, delay, move-to-waiting-children and cancel.
const SourceOperatorOverride = "operator_override"

// CancelExecutionParams are the inputs of ff_cancel_execution.
type CancelExecutionParams struct {
	ExecutionID model.ExecutionID
	Reason      string
	// Source is "worker" (with LeaseID/LeaseEpoch), SourceOperatorOverride,
	// "flow_cascade" (suppresses the completion publish) or "".
	Source     string
	LeaseID    string
	LeaseEpoch uint64
	// Lane, AttemptIndex, WaitpointID and WorkerInstanceID are pre-read
	// from exec_core (lane_id, current_attempt_index, current_waitpoint_id,
	// current_worker_instance_id) by the caller, which picks their
	// defaults; they are sent as given.
	Lane             string
	AttemptIndex     int
	WaitpointID      string
	WorkerInstanceID string
}

// Call builds ff_cancel_execution.
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] stream_meta(idx)  KEYS[4] lease_current
//	KEYS[5] lease_history  KEYS[6] lease_expiry  KEYS[7] worker_leases(holder)
//	KEYS[8] suspension_current  KEYS[9] waitpoint  KEYS[10] waitpoint condition
//	KEYS[11] suspension_timeout  KEYS[12] lane terminal  KEYS[13] attempt_timeout
//	KEYS[14] execution_deadline  KEYS[15] lane eligible  KEYS[16] lane delayed
//	KEYS[17..21] lane blocked:dependencies, budget, quota, route, operator
//	ARGV[1] execution_id  ARGV[2] reason  ARGV[3] source  ARGV[4] lease_id  ARGV[5] lease_epoch|""
func (p *CancelExecutionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	i, l, wp := p.AttemptIndex, p.Lane, p.WaitpointID
	epoch := ""
	if p.LeaseEpoch > 0 {
		epoch = strconv.FormatUint(p.LeaseEpoch, 10)
	}
	return Call{
		Function: "ff_cancel_execution",
		Keys: []string{k.Core(), k.Attempt(i), k.StreamMeta(i), k.LeaseCurrent(), k.LeaseHistory(),
			pk.LeaseExpiry(), pk.WorkerLeases(p.WorkerInstanceID), k.SuspensionCurrent(), pk.Waitpoint(wp),
			pk.WaitpointCondition(wp), pk.SuspensionTimeout(), pk.LaneTerminal(l), pk.AttemptTimeout(),
			pk.ExecutionDeadline(), pk.LaneEligible(l), pk.LaneDelayed(l), pk.LaneBlockedDependencies(l),
			pk.LaneBlockedBudget(l), pk.LaneBlockedQuota(l), pk.LaneBlockedRoute(l), pk.LaneBlockedOperator(l)},
		Args: []string{string(p.ExecutionID), p.Reason, p.Source, p.LeaseID, epoch},
	}
}

// DecodeCancelExecution reads ff_cancel_execution's reply: the phase the
// execution was cancelled from.
func DecodeCancelExecution(r *Reply) string { return r.Field(1) }

// Expire reasons of ff_expire_execution.
const (
	ExpireAttemptTimeout    = "attempt_timeout"
	ExpireExecutionDeadline = "execution_deadline"
)

// ExpireExecutionParams are the inputs of ff_expire_execution.
type ExpireExecutionParams struct {
	ExecutionID model.ExecutionID
	// Reason is ExpireAttemptTimeout or ExpireExecutionDeadline.
	Reason string
	// Lane and AttemptIndex are exec_core's lane_id and
	// current_attempt_index, pre-read by the caller.
	Lane         string
	AttemptIndex int
}

// Call builds FlowFabric's 14-KEY ff_expire_execution. KEYS[7] is the
// worker-leases key of the empty worker id, as FlowFabric sends it (the
// function derives the real one from exec_core).
//
//	KEYS[1] exec_core  KEYS[2] attempt hash(idx)  KEYS[3] stream_meta(idx)  KEYS[4] lease_current
//	KEYS[5] lease_history  KEYS[6] lease_expiry  KEYS[7] worker_leases("")  KEYS[8] lane active
//	KEYS[9] lane terminal  KEYS[10] attempt_timeout  KEYS[11] execution_deadline
//	KEYS[12] lane suspended  KEYS[13] suspension_timeout  KEYS[14] suspension_current
//	ARGV[1] execution_id  ARGV[2] expire_reason
func (p *ExpireExecutionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	i, l := p.AttemptIndex, p.Lane
	return Call{
		Function: "ff_expire_execution",
		Keys: []string{k.Core(), k.Attempt(i), k.StreamMeta(i), k.LeaseCurrent(), k.LeaseHistory(),
			pk.LeaseExpiry(), pk.WorkerLeases(""), pk.LaneActive(l), pk.LaneTerminal(l),
			pk.AttemptTimeout(), pk.ExecutionDeadline(), pk.LaneSuspended(l), pk.SuspensionTimeout(),
			k.SuspensionCurrent()},
		Args: []string{string(p.ExecutionID), p.Reason},
	}
}

// ExpireResult is the reply of ff_expire_execution.
type ExpireResult struct {
	// Status is "expired", "already_terminal" or "not_found_cleaned".
	Status string
	// FromPhase is the phase an expired execution left.
	FromPhase string
}

// DecodeExpireExecution reads ff_expire_execution's reply.
func DecodeExpireExecution(r *Reply) *ExpireResult {
	return &ExpireResult{Status: r.Field(0), FromPhase: r.Field(1)}
}
