package valkey

// Error codes the flowfabric library returns. Each is matched with
// errors.Is(err, CodeX).
const (
	CodeExecutionNotFound         ErrorCode = "execution_not_found"
	CodeInvalidInput              ErrorCode = "invalid_input"
	CodeInvalidTagKey             ErrorCode = "invalid_tag_key"
	CodeStaleLease                ErrorCode = "stale_lease"
	CodeLeaseExpired              ErrorCode = "lease_expired"
	CodeLeaseRevoked              ErrorCode = "lease_revoked"
	CodeExecutionNotActive        ErrorCode = "execution_not_active"
	CodeNoActiveLease             ErrorCode = "no_active_lease"
	CodeFenceRequired             ErrorCode = "fence_required"
	CodePartialFenceTriple        ErrorCode = "partial_fence_triple"
	CodeActiveAttemptExists       ErrorCode = "active_attempt_exists"
	CodeUseClaimResumedExecution  ErrorCode = "use_claim_resumed_execution"
	CodeNotAResumedExecution      ErrorCode = "not_a_resumed_execution"
	CodeExecutionNotLeaseable     ErrorCode = "execution_not_leaseable"
	CodeLeaseConflict             ErrorCode = "lease_conflict"
	CodeInvalidClaimGrant         ErrorCode = "invalid_claim_grant"
	CodeClaimGrantExpired         ErrorCode = "claim_grant_expired"
	CodeExecutionNotReclaimable   ErrorCode = "execution_not_reclaimable"
	CodeMaxRetriesExhausted       ErrorCode = "max_retries_exhausted"
	CodeExecutionNotEligible      ErrorCode = "execution_not_eligible"
	CodeExecutionNotInEligibleSet ErrorCode = "execution_not_in_eligible_set"
	CodeGrantAlreadyExists        ErrorCode = "grant_already_exists"
	CodeCapabilityMismatch        ErrorCode = "capability_mismatch"
	CodeInvalidCapabilities       ErrorCode = "invalid_capabilities"
	CodeInvalidPolicyJSON         ErrorCode = "invalid_policy_json"
	CodeInvalidBlockingReason     ErrorCode = "invalid_blocking_reason"
	// CodeExecutionConflict: a create re-sent an existing id with another
	// payload (fabric's, see lua/README.md).
	CodeExecutionConflict ErrorCode = "execution_conflict"
)

// Retryable reports whether a logical error means "try again later or
// elsewhere" rather than "this will never work" (FlowFabric's Retryable and
// Informational classes for claim/scheduling codes).
func Retryable(code ErrorCode) bool {
	switch code {
	case CodeUseClaimResumedExecution, CodeNotAResumedExecution, CodeExecutionNotLeaseable,
		CodeLeaseConflict, CodeInvalidClaimGrant, CodeClaimGrantExpired, CodeCapabilityMismatch,
		CodeExecutionNotEligible, CodeExecutionNotInEligibleSet, CodeGrantAlreadyExists,
		CodeExecutionNotReclaimable, "stale_graph_revision", "waitpoint_not_found",
		"waitpoint_pending_use_buffer_script":
		return true
	}
	return false
}
