package sdk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// DefaultNamespace is the namespace used when a spec or config leaves it
// empty.
const DefaultNamespace = "default"

// ClientConfig configures a Client.
type ClientConfig struct {
	// Backend is the backend (required): a connected *valkey.Client or
	// *postgres.Client, or its backend.Driver. The SDK does not close it.
	Backend backend.Provider
	// Postgres is the backend when Backend is nil (once the Postgres
	// client's own field).
	//
	// Deprecated: set Backend to the *postgres.Client.
	Postgres backend.Provider
	// Namespace is the default namespace of created executions
	// (DefaultNamespace when empty).
	Namespace string
	// Creator is stored as creator_identity ("fabric-sdk" when empty).
	Creator string
	// Clock supplies the time used to turn relative delays into absolute
	// ones (time.Now when nil).
	Clock func() time.Time
	// Logger receives warnings (slog.Default() when nil).
	Logger *slog.Logger
}

// Client creates, inspects and cancels executions and flows. It is safe
// for concurrent use; create one per process and share it.
type Client struct {
	// drv is the backend contract, bound to the deployment's partition
	// config: every operation of the client goes through it.
	drv  backend.Driver
	prov backend.Provider
	// owned is the connection Open made, closed by Close; nil for a
	// Client of NewClient, whose caller owns its backend.
	owned backend.Opened
	parts model.PartitionConfig
	ns    string
	who   string
	clock func() time.Time
	log   *slog.Logger
	// spreads caches lanes' solo-partitioner choices (LaneSpreadTTL).
	spreads laneSpreadCache
	// waits is Wait's watch of terminal transitions.
	waits waitHub
}

// NewClient returns a Client on cfg.Backend. On Valkey it is bound to the
// deployment's partition config, read from ff:config:partitions (a
// missing hash falls back to the defaults, 256/32/32, with a warning, as
// FlowFabric's SDK does); on Postgres to the client's, after checking the
// schema is migrated (backend.ErrNotMigrated otherwise).
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	prov := cfg.Backend
	if prov == nil && cfg.Postgres != nil {
		prov = cfg.Postgres
	}
	drv, err := driverOf("ClientConfig.Backend", prov)
	if err != nil {
		return nil, err
	}
	c := &Client{prov: prov, ns: cmp.Or(cfg.Namespace, DefaultNamespace),
		who: cmp.Or(cfg.Creator, "fabric-sdk"), clock: cfg.Clock, log: cfg.Logger}
	if c.clock == nil {
		c.clock = time.Now
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.parts, err = readPartitions(ctx, drv, c.log); err != nil {
		return nil, err
	}
	c.drv = drv.BindPartitions(c.parts)
	return c, nil
}

// readPartitions checks the backend and reads the deployment's partition
// config (backend.DeploymentDriver.ReadDeployment); a Valkey deployment
// without ff:config:partitions gets the defaults and a warning.
func readPartitions(ctx context.Context, drv backend.Driver, log *slog.Logger) (model.PartitionConfig, error) {
	dep, err := drv.ReadDeployment(ctx)
	if err != nil {
		return model.PartitionConfig{}, fmt.Errorf("sdk: %w", err)
	}
	if !dep.Found {
		log.Warn("ff:config:partitions not found; using default partition counts",
			"flow", dep.Partitions.Flow, "budget", dep.Partitions.Budget, "quota", dep.Partitions.Quota)
	}
	return dep.Partitions, nil
}

// Partitions returns the partition config the client mints ids with.
func (c *Client) Partitions() model.PartitionConfig { return c.parts }

// ExecutionSpec describes an execution to create. Only Lane is required.
type ExecutionSpec struct {
	// ID is a pre-minted id (e.g. for a flow member, see
	// Client.NewFlowExecutionID); empty mints a solo id on the lane's
	// partition.
	ID model.ExecutionID
	// Namespace overrides the client's namespace.
	Namespace string
	// Lane is the lane the execution is claimed from (LaneId rules:
	// non-empty, at most 64 bytes, printable ASCII).
	Lane string
	// Kind is the execution kind handlers dispatch on.
	Kind string
	// Payload is the opaque input handed to the worker.
	Payload []byte
	// Priority orders claims within a lane: higher first, 0..9000.
	Priority int
	// Delay postpones the first claim (0: eligible now; never negative).
	Delay time.Duration
	// RunAt, instead of Delay, postpones the first claim until an
	// absolute time (one already past means now).
	RunAt time.Time
	// IdempotencyKey makes the create idempotent (for 24 h on Valkey; on
	// Postgres as long as the first execution exists) within the
	// execution's partition: a repeat returns the first id.
	IdempotencyKey string
	// Tags are stored in the execution's tags hash.
	Tags map[string]string
	// Policy sets retries, timeouts and routing; nil means none.
	Policy *Policy
}

func (s *ExecutionSpec) validate() error {
	if err := ValidateLane(s.Lane); err != nil {
		return err
	}
	if s.ID != "" {
		if _, err := model.ParseExecutionID(string(s.ID)); err != nil {
			return invalid("id", "%v", err)
		}
	}
	if s.Priority < 0 || s.Priority > MaxPriority {
		return invalid("priority", "%d is out of range 0..%d", s.Priority, MaxPriority)
	}
	if s.Delay < 0 {
		return invalid("delay", "must not be negative (got %s)", s.Delay)
	}
	if s.Delay > 0 && !s.RunAt.IsZero() {
		return invalid("delay", "set Delay or RunAt, not both")
	}
	if len(s.IdempotencyKey) > IdempotencyKeyMaxBytes {
		return invalid("idempotency_key", "%d bytes exceed %d", len(s.IdempotencyKey), IdempotencyKeyMaxBytes)
	}
	for k := range s.Tags {
		if k == "" {
			return invalid("tags", "tag keys must not be empty")
		}
	}
	return s.Policy.validate()
}

// CreateExecution validates spec, then creates the execution
// (ff_create_execution). It returns the execution id; with an
// IdempotencyKey that was already used, it returns the first execution's
// id and creates nothing.
//
// Invalid input returns an error wrapping ErrInvalidInput before any
// network call.
func (c *Client) CreateExecution(ctx context.Context, spec ExecutionSpec) (model.ExecutionID, error) {
	if err := spec.validate(); err != nil {
		return "", err
	}
	p, err := c.createParams(ctx, &spec)
	if err != nil {
		return "", err
	}
	res, err := c.drv.CreateExecution(ctx, p)
	if err != nil {
		return "", fmt.Errorf("sdk: %w", err)
	}
	return res.ExecutionID, nil
}

// createParams is spec as the driver's create: the id minted (a solo id
// on the lane's partition) unless given, the delay made absolute and the
// policy encoded.
func (c *Client) createParams(ctx context.Context, spec *ExecutionSpec) (*backend.CreateExecutionParams, error) {
	id := spec.ID
	if id == "" {
		var err error
		if id, err = c.mintSoloID(ctx, spec); err != nil {
			return nil, err
		}
	} else if id.Partition().Index >= c.parts.Flow {
		return nil, invalid("id", "partition %d is outside the deployment's %d flow partitions", id.Partition().Index, c.parts.Flow)
	}
	var delayUntil int64
	if spec.Delay > 0 {
		delayUntil = c.clock().Add(spec.Delay).UnixMilli()
	} else if !spec.RunAt.IsZero() && spec.RunAt.After(c.clock()) {
		delayUntil = spec.RunAt.UnixMilli()
	}
	p := &backend.CreateExecutionParams{
		ExecutionID: id, Namespace: cmp.Or(spec.Namespace, c.ns), LaneID: spec.Lane,
		ExecutionKind: spec.Kind, Priority: spec.Priority, CreatorIdentity: c.who,
		PolicyJSON: policyJSON(spec.Priority, delayUntil, spec.Policy), Payload: spec.Payload,
		DelayUntil: delayUntil, IdempotencyKey: spec.IdempotencyKey, Tags: spec.Tags,
	}
	if spec.Policy != nil && !spec.Policy.Deadline.IsZero() {
		p.ExecutionDeadlineAt = spec.Policy.Deadline.UnixMilli()
	}
	return p, nil
}

// NewFlowExecutionID mints an execution id on flow's partition, for an
// execution that will join that flow.
func (c *Client) NewFlowExecutionID(flow model.UUID) model.ExecutionID {
	return c.parts.NewFlowExecutionID(flow)
}

// ErrNotFound is returned (wrapped) when an execution does not exist.
var ErrNotFound = errors.New("sdk: execution not found")

// ExecutionState is an execution's state: the derived public state and
// the stored state vector.
type ExecutionState struct {
	// ID, Namespace, Lane and Kind identify the execution.
	ID        model.ExecutionID
	Namespace string
	Lane      string
	Kind      string
	// PublicState is the derived state users see (waiting, active,
	// completed, ...).
	PublicState string
	// LifecyclePhase, OwnershipState, EligibilityState, BlockingReason,
	// TerminalOutcome and AttemptState are the stored state vector.
	LifecyclePhase   string
	OwnershipState   string
	EligibilityState string
	BlockingReason   string
	TerminalOutcome  string
	AttemptState     string
	// AttemptCount is total_attempt_count; RetryCount and ReclaimCount
	// count fail→retry and lease reclaims.
	AttemptCount, RetryCount, ReclaimCount int
	// LeaseEpoch is current_lease_epoch (never cleared).
	LeaseEpoch uint64
	// FailureReason is set after a failure.
	FailureReason string
	// FlowID is set for flow members.
	FlowID string
	// Fields is the whole exec_core hash.
	Fields map[string]string
}

// Terminal reports a terminal execution.
func (s *ExecutionState) Terminal() bool { return s.LifecyclePhase == model.PhaseTerminal }

// State reads an execution's state (one HGETALL of exec_core; on
// Postgres one read of its ff_exec_core row, under the hash's field names).
func (c *Client) State(ctx context.Context, id model.ExecutionID) (*ExecutionState, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, invalid("id", "%v", err)
	}
	bs, err := c.drv.ExecutionState(ctx, id)
	if errors.Is(err, backend.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("sdk: read state of %s: %w", id, err)
	}
	st := stateFrom(id, bs.Fields)
	st.PublicState = bs.PublicState // the driver's, in the one vocabulary of both backends
	return st, nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func stateFrom(id model.ExecutionID, m map[string]string) *ExecutionState {
	epoch, _ := strconv.ParseUint(m["current_lease_epoch"], 10, 64)
	return &ExecutionState{
		ID: id, Namespace: m["namespace"], Lane: m["lane_id"], Kind: m["execution_kind"],
		PublicState: m["public_state"], LifecyclePhase: m["lifecycle_phase"],
		OwnershipState: m["ownership_state"], EligibilityState: m["eligibility_state"],
		BlockingReason: m["blocking_reason"], TerminalOutcome: m["terminal_outcome"],
		AttemptState: m["attempt_state"], AttemptCount: atoi(m["total_attempt_count"]),
		RetryCount: atoi(m["retry_count"]), ReclaimCount: atoi(m["lease_reclaim_count"]),
		LeaseEpoch: epoch, FailureReason: m["failure_reason"], FlowID: m["flow_id"], Fields: m,
	}
}

// Result returns a completed execution's result payload (nil when none
// was stored).
func (c *Client) Result(ctx context.Context, id model.ExecutionID) ([]byte, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, invalid("id", "%v", err)
	}
	b, err := c.drv.ExecutionResult(ctx, id)
	if errors.Is(err, backend.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sdk: read result of %s: %w", id, err)
	}
	return b, nil
}
