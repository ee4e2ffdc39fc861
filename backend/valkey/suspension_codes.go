package valkey

import "github.com/fabric-host/fabric/model/fcall"

// Error codes of the suspension, signal and stream families.
const (
	CodeExecutionNotSuspended           ErrorCode = "execution_not_suspended"
	CodeAlreadySuspended                ErrorCode = "already_suspended"
	CodeWaitpointClosed                 ErrorCode = "waitpoint_closed"
	CodeWaitpointAlreadyExists          ErrorCode = "waitpoint_already_exists"
	CodeWaitpointNotOpen                ErrorCode = "waitpoint_not_open"
	CodeWaitpointNotPending             ErrorCode = "waitpoint_not_pending"
	CodePendingWaitpointExpired         ErrorCode = "pending_waitpoint_expired"
	CodeWaitpointNotFound               ErrorCode = "waitpoint_not_found"
	CodeWaitpointPendingUseBuffer       ErrorCode = "waitpoint_pending_use_buffer_script"
	CodeTargetNotSignalable             ErrorCode = "target_not_signalable"
	CodeSignalLimitExceeded             ErrorCode = "signal_limit_exceeded"
	CodeInvalidToken                    ErrorCode = "invalid_token"
	CodeInvalidLeaseForSuspend          ErrorCode = "invalid_lease_for_suspend"
	CodeInvalidWaitpointForExecution    ErrorCode = "invalid_waitpoint_for_execution"
	CodeWaitpointNotTokenBound          ErrorCode = "waitpoint_not_token_bound"
	CodeMissingToken                    ErrorCode = "missing_token"
	CodeTokenExpired                    ErrorCode = "token_expired"
	CodeHMACSecretNotInitialized        ErrorCode = "hmac_secret_not_initialized"
	CodeInvalidSecret                   ErrorCode = "invalid_secret"
	CodeInvalidKeysMissingHMAC          ErrorCode = "invalid_keys_missing_hmac"
	CodeAdditionalWaitpointMalformed    ErrorCode = "additional_waitpoint_binding_malformed"
	CodeUsePendingWithExtrasUnsupported ErrorCode = "use_pending_with_extras_unsupported"
	CodeInvalidKid                      ErrorCode = "invalid_kid"
	CodeInvalidSecretHex                ErrorCode = "invalid_secret_hex"
	CodeRotationConflict                ErrorCode = "rotation_conflict"
	CodeStreamClosed                    ErrorCode = "stream_closed"
	CodeStaleOwnerCannotAppend          ErrorCode = "stale_owner_cannot_append"
	CodeRetentionLimitExceeded          ErrorCode = "retention_limit_exceeded"
	CodeCorruption                      ErrorCode = "corruption"
)

// Alternative success statuses of the suspension and signal families.
const (
	// StatusAlreadySatisfied: ff_suspend_execution found the pending
	// waitpoint's buffered signals already satisfy the condition; the lease
	// is kept and the execution stays active.
	StatusAlreadySatisfied = fcall.StatusAlreadySatisfied
	// StatusSignalDuplicate: a signal with the same idempotency key was
	// already accepted on the waitpoint; the field is the first signal id.
	StatusSignalDuplicate = fcall.StatusSignalDuplicate
)
