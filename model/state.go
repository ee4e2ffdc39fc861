package model

// Values of exec_core's stored state dimensions, as FlowFabric's Lua writes
// them (snake_case strings).

// Lifecycle phases (exec_core.lifecycle_phase).
const (
	PhaseSubmitted = "submitted"
	PhaseRunnable  = "runnable"
	PhaseActive    = "active"
	PhaseSuspended = "suspended"
	PhaseTerminal  = "terminal"
)

// Ownership states (exec_core.ownership_state).
const (
	OwnershipUnowned                 = "unowned"
	OwnershipLeased                  = "leased"
	OwnershipLeaseExpiredReclaimable = "lease_expired_reclaimable"
	OwnershipLeaseRevoked            = "lease_revoked"
)

// Eligibility states (exec_core.eligibility_state).
const (
	EligibleNow                = "eligible_now"
	EligibleNotUntilTime       = "not_eligible_until_time"
	EligibleBlockedByDeps      = "blocked_by_dependencies"
	EligibleBlockedByBudget    = "blocked_by_budget"
	EligibleBlockedByQuota     = "blocked_by_quota"
	EligibleBlockedByRoute     = "blocked_by_route"
	EligibleBlockedByLaneState = "blocked_by_lane_state"
	EligibleBlockedByOperator  = "blocked_by_operator"
	EligibleNotApplicable      = "not_applicable"
)

// Terminal outcomes (exec_core.terminal_outcome).
const (
	OutcomeNone      = "none"
	OutcomeSuccess   = "success"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	OutcomeExpired   = "expired"
	OutcomeSkipped   = "skipped"
)

// Attempt states (exec_core.attempt_state).
const (
	AttemptNone          = "none"
	AttemptPendingFirst  = "pending_first_attempt"
	AttemptRunning       = "running_attempt"
	AttemptInterrupted   = "attempt_interrupted"
	AttemptPendingRetry  = "pending_retry_attempt"
	AttemptPendingReplay = "pending_replay_attempt"
	AttemptTerminal      = "attempt_terminal"
)

// Public states (exec_core.public_state), what users see.
const (
	PublicWaiting         = "waiting"
	PublicDelayed         = "delayed"
	PublicRateLimited     = "rate_limited"
	PublicWaitingChildren = "waiting_children"
	PublicActive          = "active"
	PublicSuspended       = "suspended"
	PublicResumable       = "resumable"
	PublicCompleted       = "completed"
	PublicFailed          = "failed"
	PublicCancelled       = "cancelled"
	PublicExpired         = "expired"
	PublicSkipped         = "skipped"
)

// PublicStates lists every public state in display order.
var PublicStates = []string{
	PublicWaiting, PublicDelayed, PublicRateLimited, PublicWaitingChildren, PublicActive,
	PublicSuspended, PublicResumable, PublicCompleted, PublicFailed, PublicCancelled,
	PublicExpired, PublicSkipped,
}

// DerivePublicState applies FlowFabric's derivation rule to the stored
// dimensions. The Lua writes public_state explicitly and does not always
// follow this rule (admission blocks write rate_limited); readers should
// prefer the stored value.
func DerivePublicState(phase, eligibility, outcome string) string {
	switch phase {
	case PhaseTerminal:
		switch outcome {
		case OutcomeSuccess:
			return PublicCompleted
		case OutcomeCancelled:
			return PublicCancelled
		case OutcomeExpired:
			return PublicExpired
		case OutcomeSkipped:
			return PublicSkipped
		}
		return PublicFailed
	case PhaseSuspended:
		return PublicSuspended
	case PhaseActive:
		return PublicActive
	case PhaseRunnable:
		switch eligibility {
		case EligibleNotUntilTime:
			return PublicDelayed
		case EligibleBlockedByDeps:
			return PublicWaitingChildren
		case EligibleBlockedByBudget, EligibleBlockedByQuota:
			return PublicRateLimited
		}
	}
	return PublicWaiting
}

// Scoring constants shared by the Lua and the Go side.
const (
	// PriorityMax is the highest priority; priorities are clamped to [0, 9000].
	PriorityMax = 9000
	// PriorityScoreFactor multiplies priority in the eligible score
	// created_at - priority*1e12.
	PriorityScoreFactor = 1_000_000_000_000
	// SuspendedNoTimeoutScore is the lane:suspended score of a suspension
	// without timeout.
	SuspendedNoTimeoutScore = 9999999999999
)

// EligibleScore is the lane:eligible score of an execution.
func EligibleScore(createdAtMs int64, priority int) float64 {
	return float64(createdAtMs) - float64(priority)*PriorityScoreFactor
}

// ExpectedLaneIndex returns the lane index an execution in this state
// belongs in (pk is the execution's partition), or "" when the state has
// none: an active execution whose lease expired or was revoked (it stays
// out of lane:active until reclaimed), and unknown states.
func ExpectedLaneIndex(pk PartitionKeys, phase, eligibility, ownership, lane string) string {
	switch phase {
	case PhaseActive:
		if ownership == OwnershipLeased {
			return pk.LaneActive(lane)
		}
	case PhaseRunnable:
		switch eligibility {
		case EligibleNow:
			return pk.LaneEligible(lane)
		case EligibleNotUntilTime:
			return pk.LaneDelayed(lane)
		case EligibleBlockedByDeps:
			return pk.LaneBlockedDependencies(lane)
		case EligibleBlockedByBudget:
			return pk.LaneBlockedBudget(lane)
		case EligibleBlockedByQuota:
			return pk.LaneBlockedQuota(lane)
		case EligibleBlockedByRoute:
			return pk.LaneBlockedRoute(lane)
		case EligibleBlockedByOperator:
			return pk.LaneBlockedOperator(lane)
		}
	case PhaseSuspended:
		return pk.LaneSuspended(lane)
	case PhaseTerminal:
		return pk.LaneTerminal(lane)
	}
	return ""
}
