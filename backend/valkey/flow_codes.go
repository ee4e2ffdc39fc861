package valkey

// Error codes of the budget, quota and flow families.
const (
	CodeFlowNotFound            ErrorCode = "flow_not_found"
	CodeFlowAlreadyTerminal     ErrorCode = "flow_already_terminal"
	CodeExecutionNotInFlow      ErrorCode = "execution_not_in_flow"
	CodeExecutionAlreadyInFlow  ErrorCode = "execution_already_in_flow"
	CodeDependencyAlreadyExists ErrorCode = "dependency_already_exists"
	CodeSelfReferencingEdge     ErrorCode = "self_referencing_edge"
	CodeCycleDetected           ErrorCode = "cycle_detected"
	CodeInvalidDependency       ErrorCode = "invalid_dependency"
	CodeStaleGraphRevision      ErrorCode = "stale_graph_revision"
	CodeDepsNotSatisfied        ErrorCode = "deps_not_satisfied"
	CodeNotBlockedByDeps        ErrorCode = "not_blocked_by_deps"
	CodeNotRunnable             ErrorCode = "not_runnable"
	CodeTerminal                ErrorCode = "terminal"
	CodeInvariantViolation      ErrorCode = "invariant_violation"
	CodeInvalidArgs             ErrorCode = "invalid_args"
	CodeInvalidGraceMs          ErrorCode = "invalid_grace_ms"
	CodeExecutionNotTerminal    ErrorCode = "execution_not_terminal"
	CodeMaxReplaysExhausted     ErrorCode = "max_replays_exhausted"
)

// AlreadyMemberOfDifferentFlowPrefix starts the code ff_add_execution_to_flow
// returns when the execution belongs to another flow; the other flow's id
// is glued onto the code ("already_member_of_different_flow:<flow_id>").
const AlreadyMemberOfDifferentFlowPrefix = "already_member_of_different_flow:"
