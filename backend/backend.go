// Package backend is the contract between fabric's SDK and its two
// backends, in the style of River's riverdriver: the parameter and result
// types of every execution operation, defined once, and Driver, the
// interface both drivers implement (backend/valkey.NewDriver,
// backend/postgres.NewDriver). backend/backendtest runs every operation of
// the interface against both on real servers and asserts the same
// observable behaviour.
//
// Imports go model ← backend ← drivers: this package never imports a
// driver.
//
// # Errors
//
// A driver's errors match the sentinels below with errors.Is, and still
// wrap the driver's own error (a *valkey.LuaError, a postgres.ErrorCode, a
// pgconn.PgError), so callers that need a driver's detail keep it. A
// refusal by the stored state carries its FlowFabric code (CodeOf,
// CodedError); Driver.IsTransient tells a call worth sending again; and
// EndedBy tells the repeat of a lease-ending call whose reply was lost.
// The SDK classifies errors through these alone, so it imports no
// driver.
package backend

import (
	"context"
	"crypto/sha256"
	"errors"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// Sentinel errors both drivers map their own errors to.
var (
	// ErrNotFound: the execution does not exist.
	ErrNotFound = errors.New("backend: execution not found")
	// ErrLeaseGone: the fence no longer holds the lease — a newer lease
	// epoch or attempt (stale fence), an expired or revoked lease, or an
	// execution that is no longer active. The lease cannot come back.
	ErrLeaseGone = errors.New("backend: lease gone")
	// ErrTerminal: the execution already ended (cancel of a terminal
	// execution).
	ErrTerminal = errors.New("backend: execution already terminal")
	// ErrNotClaimable: the execution exists but is not runnable and
	// eligible now (claimed by another worker, delayed, blocked, ended).
	ErrNotClaimable = errors.New("backend: execution not claimable")
	// ErrCapabilityMismatch: the execution requires capabilities the
	// claiming worker does not offer.
	ErrCapabilityMismatch = errors.New("backend: worker lacks a required capability")
	// ErrInvalidInput: a parameter is malformed (an execution id that
	// does not parse, an empty lane, a policy that is not JSON, a
	// non-positive lease TTL).
	ErrInvalidInput = errors.New("backend: invalid input")
	// ErrNotMigrated: the backend has no fabric schema yet; run `fabric
	// migrate`. (The Valkey driver loads its function library on first
	// use and never returns it.)
	ErrNotMigrated = errors.New("backend: schema not migrated (run `fabric migrate`)")
)

// Driver is the set of execution operations the SDK's worker and client
// use, implemented by each backend. Every method is safe for concurrent
// use. Timestamps are milliseconds since the Unix epoch, on the backend's
// clock.
type Driver interface {
	// Name is the backend's name: "valkey" or "postgres".
	Name() string
	// Partitions is the deployment's partition config the driver routes
	// with (a lane's solo partition, a flow's partition).
	Partitions() model.PartitionConfig
	// IsTransient reports whether err, answered by one of the driver's
	// operations, is a transport failure or the server's passing bad
	// moment (busy, loading, failing over) worth sending the same call
	// again for, rather than a refusal (CodedError) or a context's end.
	IsTransient(err error) bool

	// CreateExecution creates one execution, runnable at once (or delayed
	// until DelayUntil). It is idempotent by id and, with an
	// IdempotencyKey, by key: a repeat creates nothing and reports
	// Duplicate; the id again with another payload (no key) is
	// ErrConflict. p is checked whole first (ValidateCreateExecution):
	// a refusal is ErrInvalidInput and writes nothing.
	CreateExecution(ctx context.Context, p *CreateExecutionParams) (*CreateExecutionResult, error)
	// CreateExecutionTx is CreateExecution inside the caller's own
	// database transaction tx (a pgx.Tx on Postgres): the execution — and
	// a flow member's flow — exists only if tx commits, is neither
	// visible nor claimable before, and its eligible notification goes
	// out at the commit. A backend without such transactions (Valkey)
	// answers ErrUnsupported; a tx of the wrong type is ErrInvalidInput.
	CreateExecutionTx(ctx context.Context, tx any, p *CreateExecutionParams) (*CreateExecutionResult, error)
	// CreateExecutions creates several executions in as few round trips
	// as the backend allows. results[i] is ps[i]'s outcome, nil when it
	// failed; the failures are joined in the error, each naming its index.
	// Creation is not atomic across items.
	CreateExecutions(ctx context.Context, ps []*CreateExecutionParams) ([]*CreateExecutionResult, error)

	// ClaimNext claims the best eligible execution of a lane — highest
	// priority, then oldest — whose required capabilities the worker
	// offers, under a new lease. Nothing to claim is (nil, nil).
	ClaimNext(ctx context.Context, p *ClaimNextParams) (*ClaimResult, error)
	// ClaimExecution claims one named execution. One that is not runnable
	// and eligible is ErrNotClaimable; one needing capabilities the
	// worker lacks is ErrCapabilityMismatch; a missing one ErrNotFound.
	ClaimExecution(ctx context.Context, p *ClaimExecutionParams) (*ClaimResult, error)
	// RenewLease extends the fenced lease to now+LeaseTTLMs and returns
	// the new expiry. A fence that no longer holds the lease is
	// ErrLeaseGone.
	RenewLease(ctx context.Context, p *RenewLeaseParams) (int64, error)
	// CompleteExecution ends the fenced attempt successfully and stores
	// the result. A fence that no longer holds the lease is ErrLeaseGone.
	CompleteExecution(ctx context.Context, p *CompleteExecutionParams) error
	// FailExecution fails the fenced attempt: with retries left under the
	// retry policy the execution is delayed by its backoff and retried,
	// otherwise it fails terminally. A fence that no longer holds the
	// lease is ErrLeaseGone.
	FailExecution(ctx context.Context, p *FailExecutionParams) (*FailResult, error)
	// DelayExecution releases the fenced lease and parks the execution
	// until DelayUntil; the same attempt continues (under a new lease
	// epoch) once it is eligible again. A fence that no longer holds the
	// lease is ErrLeaseGone.
	DelayExecution(ctx context.Context, p *DelayExecutionParams) error
	// CancelExecution cancels a non-terminal execution, leased or not (an
	// operator override: no fence). A terminal execution is ErrTerminal;
	// the holder of a lease finds it gone at its next fenced call.
	CancelExecution(ctx context.Context, p *CancelExecutionParams) error

	// ExecutionState reads an execution's state.
	ExecutionState(ctx context.Context, id model.ExecutionID) (*ExecutionState, error)
	// ExecutionResult reads the result a completed execution stored; nil
	// when it stored none (or has not completed).
	ExecutionResult(ctx context.Context, id model.ExecutionID) ([]byte, error)

	// SubscribeCompletions delivers the terminal outcomes of flow members
	// (success, failed, cancelled, expired, skipped) committed after it
	// returns; executions outside a flow are not delivered. It returns
	// once the subscription is registered.
	SubscribeCompletions(ctx context.Context, p *SubscribeCompletionsParams) (CompletionSubscription, error)
	// WatchTerminal calls wake after executions may have ended — any
	// execution, in a flow or not — with the flow partition index of the
	// ended ones where the backend's wake-up names it, or -1 where it
	// does not, until ctx ends (nil) or the watch breaks (its error).
	// onUp runs once the watch is subscribed: a state read after onUp
	// misses no transition the watch would not wake for. A wake is a
	// hint to read states again, never a state itself.
	WatchTerminal(ctx context.Context, wake func(partition int), onUp func()) error

	// ControlDriver: cancel as the holder, cancel a flow, suspension,
	// signals and streams (control.go).
	ControlDriver
	// BudgetDriver: budgets, quotas and progress reports (budget.go).
	BudgetDriver
	// FlowDriver: creating flows and adding members (flow.go).
	FlowDriver
	// AttemptReadDriver: tailing streams, summaries and resume signals
	// (stream.go).
	AttemptReadDriver
	// WorkerRegistryDriver: worker registration and liveness (worker.go).
	WorkerRegistryDriver
	// DeploymentDriver: the schema check and partition config a client
	// starts with (deployment.go).
	DeploymentDriver
	// ClaimerDriver: a worker's claim session, its claim and
	// complete-and-claim hot path (claimer.go).
	ClaimerDriver
	// LaneSpreadDriver: a lane's solo-partitioner choice (claimer.go).
	LaneSpreadDriver
	// Inspector: the operator console's reads and actions
	// (inspector.go).
	Inspector
}

// CreateExecutionParams are the inputs of Driver.CreateExecution. The
// caller mints ExecutionID (model.PartitionConfig.NewSoloExecutionID, or
// NewFlowExecutionID for a flow member).
type CreateExecutionParams struct {
	ExecutionID model.ExecutionID
	// FlowID makes the execution a member of that flow (created when
	// absent, with FlowKind); its terminal outcome is then delivered to
	// completion subscribers. ExecutionID must be on the flow's
	// partition. Zero means standalone.
	FlowID   model.UUID
	FlowKind string

	Namespace       string
	LaneID          string
	ExecutionKind   string
	Priority        int
	CreatorIdentity string
	// PolicyJSON is the ExecutionPolicy document (retry_policy,
	// routing_requirements.required_capabilities, ...); "" means none.
	PolicyJSON string
	// Payload is the opaque input; nil stores none.
	Payload []byte
	// DelayUntil delays the first claim; 0 means none.
	DelayUntil int64
	// IdempotencyKey makes the create idempotent by (namespace, key): a
	// repeat reports Duplicate and the first execution's id.
	IdempotencyKey string
	// Tags are stored with the execution.
	Tags map[string]string
	// ExecutionDeadlineAt is an absolute deadline; 0 means none.
	ExecutionDeadlineAt int64
}

// CreateExecutionResult is the outcome of a create.
type CreateExecutionResult struct {
	// ExecutionID is the created execution, or on a duplicate the one
	// that existed. With an IdempotencyKey it may differ from the id
	// asked for (Postgres derives it from the key: IdempotentExecutionID).
	ExecutionID model.ExecutionID
	// Duplicate reports that nothing was created.
	Duplicate bool
	// PublicState is "waiting" or "delayed"; empty on a duplicate.
	PublicState string
}

// Fence identifies one lease: the attempt it runs and the lease epoch.
// Valkey checks (LeaseID, LeaseEpoch, AttemptID), Postgres
// (AttemptIndex, LeaseEpoch); a driver ignores the fields it does not
// check, so a fence is always passed back whole, as a claim returned it.
type Fence = fcall.Fence

// ClaimNextParams are the inputs of Driver.ClaimNext.
type ClaimNextParams struct {
	LaneID           string
	WorkerID         string
	WorkerInstanceID string
	// Capabilities the worker offers; an execution's required
	// capabilities must all be among them.
	Capabilities []string
	// LeaseTTLMs is the lease lifetime (> 0).
	LeaseTTLMs int64
	// Partitions restricts the search to these flow-family partition
	// indexes; empty means the lane's solo partition first, then every
	// partition (flow members of the lane).
	Partitions []uint16
}

// ClaimExecutionParams are the inputs of Driver.ClaimExecution.
type ClaimExecutionParams struct {
	ExecutionID      model.ExecutionID
	WorkerID         string
	WorkerInstanceID string
	Capabilities     []string
	LeaseTTLMs       int64
}

// ClaimResult is a lease a claim acquired, and what a worker needs to
// run the execution.
type ClaimResult struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	// ExpiresAt is the lease expiry.
	ExpiresAt int64
	// AttemptType is initial, retry or resumed (an interrupted attempt
	// continuing under a new lease).
	AttemptType string
	LaneID      string
	Kind        string
	Namespace   string
	Payload     []byte
	// FlowID is the flow's id in text form, "" outside a flow.
	FlowID string
}

// Holder is what the lease holder knows about its execution beyond the
// fence. Drivers that need the lane or the holder's instance id to
// address an operation (Valkey builds its KEYS from them) use it instead
// of reading them first; empty fields are read.
type Holder struct {
	LaneID           string
	WorkerInstanceID string
}

// RenewLeaseParams are the inputs of Driver.RenewLease.
type RenewLeaseParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	LeaseTTLMs  int64
}

// CompleteExecutionParams are the inputs of Driver.CompleteExecution.
type CompleteExecutionParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	Holder      Holder
	// Result is stored when non-nil.
	Result []byte
}

// FailExecutionParams are the inputs of Driver.FailExecution.
type FailExecutionParams struct {
	ExecutionID     model.ExecutionID
	Fence           Fence
	Holder          Holder
	FailureReason   string
	FailureCategory string
	// RetryPolicyJSON overrides the stored policy's retry_policy object;
	// "" uses the stored one (none: a terminal failure).
	RetryPolicyJSON string
}

// FailResult is the outcome of Driver.FailExecution.
type FailResult struct {
	// RetryScheduled reports a retry, eligible at DelayUntil.
	RetryScheduled bool
	DelayUntil     int64
}

// DelayExecutionParams are the inputs of Driver.DelayExecution.
type DelayExecutionParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	Holder      Holder
	// DelayUntil is when the execution becomes eligible again.
	DelayUntil int64
}

// CancelExecutionParams are the inputs of Driver.CancelExecution.
type CancelExecutionParams struct {
	ExecutionID model.ExecutionID
	// Reason is stored as the cancellation reason.
	Reason string
}

// ExecutionState is an execution's stored state vector, read the same on
// both backends (Postgres reads its row under the Valkey exec_core
// field names).
type ExecutionState struct {
	ID               model.ExecutionID
	Namespace        string
	LaneID           string
	Kind             string
	PublicState      string
	LifecyclePhase   string
	OwnershipState   string
	EligibilityState string
	AttemptState     string
	BlockingReason   string
	TerminalOutcome  string
	// AttemptIndex is the current attempt's index; AttemptCount counts
	// attempts started, RetryCount retries scheduled.
	AttemptIndex  int
	AttemptCount  int
	RetryCount    int
	Priority      int
	LeaseEpoch    uint64
	FailureReason string
	FlowID        string
	// Fields are every stored field under its exec_core name.
	Fields map[string]string
}

// SubscribeCompletionsParams are the inputs of Driver.SubscribeCompletions.
type SubscribeCompletionsParams struct {
	// Buffer is the channel capacity (default 1024). A full channel
	// blocks the subscription (backpressure), it does not drop.
	Buffer int
}

// Completion is a flow member's terminal outcome.
type Completion struct {
	ExecutionID model.ExecutionID
	FlowID      model.UUID
	// Outcome is success, failed, cancelled, expired or skipped.
	Outcome string
}

// CompletionSubscription is a live completion subscription.
type CompletionSubscription interface {
	// C delivers completions in commit order; it is closed when the
	// subscription stops.
	C() <-chan Completion
	// Close stops the subscription and waits for it; it is safe to call
	// more than once.
	Close()
	// Err is the error that stopped the subscription, nil after Close.
	Err() error
}

// IdempotentExecutionID is the execution id of an idempotency key on
// partition p, for a backend without an idempotency index: a name-based
// (SHA-256, version 8) UUID of the namespace and key, so that a repeat
// lands on the same id.
func IdempotentExecutionID(p model.Partition, namespace, key string) model.ExecutionID {
	sum := sha256.Sum256([]byte("fabric.idempotency\x00" + namespace + "\x00" + key))
	var u model.UUID
	copy(u[:], sum[:16])
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	return model.NewExecutionID(p, u)
}
