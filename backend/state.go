package backend

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// StateFromFields decodes an execution's exec_core fields (Valkey's hash,
// or Postgres's row read under the same names) into an ExecutionState.
// m is kept as Fields.
func StateFromFields(id model.ExecutionID, m map[string]string) *ExecutionState {
	atoi := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	epoch, _ := strconv.ParseUint(m["current_lease_epoch"], 10, 64)
	return &ExecutionState{
		ID: id, Namespace: m["namespace"], LaneID: m["lane_id"], Kind: m["execution_kind"],
		PublicState: m["public_state"], LifecyclePhase: m["lifecycle_phase"],
		OwnershipState: m["ownership_state"], EligibilityState: m["eligibility_state"],
		AttemptState: m["attempt_state"], BlockingReason: m["blocking_reason"],
		TerminalOutcome: m["terminal_outcome"], AttemptIndex: atoi("current_attempt_index"),
		AttemptCount: atoi("total_attempt_count"), RetryCount: atoi("retry_count"),
		Priority: atoi("priority"), LeaseEpoch: epoch, FailureReason: m["failure_reason"],
		FlowID: m["flow_id"], Fields: m,
	}
}
