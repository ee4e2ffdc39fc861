package backend

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// ErrConflict: what the execution's state refuses — an operator action
// (cancel of an ended execution, a priority change of one not eligible, a
// signal to one with no current waitpoint), or a create that sent an
// existing execution's id, without an idempotency key, with another
// payload (nothing is written; the existing execution is unchanged). The
// error names the refusal's FlowFabric code when the backend gave one.
var ErrConflict = errors.New("backend: refused by the execution's state")

// Inspector is the part of Driver the operator console and the CLI read
// and act through: listings and counts of executions, one execution's
// whole history (attempts with their own outcomes and errors, lease
// events with their release reasons and workers, suspension, waitpoints,
// flow edges), a flow's DAG, lanes, workers, and the operator's actions.
// Both drivers implement it and answer the same history for the same
// work; backendtest holds them to it.
//
// Errors: a malformed input is ErrInvalidInput; an unknown execution,
// flow, lane or waitpoint ErrNotFound; an action the state refuses
// ErrConflict; one the backend cannot take ErrUnsupported.
type Inspector interface {
	// ListExecutions lists one page of executions, filtered by lane,
	// state and flow. Valkey lists in lane-index order (partition, lane,
	// index, score); Postgres by creation time.
	ListExecutions(ctx context.Context, p *ListExecutionsParams) (*ExecutionPage, error)
	// InspectExecution reads everything the console shows of one
	// execution.
	InspectExecution(ctx context.Context, id model.ExecutionID) (*ExecutionDetail, error)
	// InspectFlow reads a flow's record, members and edges.
	InspectFlow(ctx context.Context, id model.UUID) (*FlowView, error)
	// InspectLanes counts each lane's executions per lane index, lanes
	// sorted by name.
	InspectLanes(ctx context.Context) ([]LaneCounts, error)
	// InspectWorkers lists the worker instances registered in namespace,
	// with the leases each holds, sorted by instance id.
	InspectWorkers(ctx context.Context, namespace string) ([]WorkerInfo, error)

	// OperatorCancel cancels an execution as an operator (cancelled_by
	// operator_override), leased or not; reason defaults to
	// operator_cancel.
	OperatorCancel(ctx context.Context, id model.ExecutionID, reason string) (*ActionResult, error)
	// OperatorReplay re-runs an ended execution.
	OperatorReplay(ctx context.Context, id model.ExecutionID) (*ActionResult, error)
	// OperatorPriority changes an eligible execution's priority
	// (0..model.PriorityMax).
	OperatorPriority(ctx context.Context, id model.ExecutionID, priority int) (*ActionResult, error)
	// OperatorSignal delivers a signal to an execution's waitpoint (its
	// current one unless p names another), reading the waitpoint's token
	// itself: the operator is trusted by the caller, not by the token.
	OperatorSignal(ctx context.Context, id model.ExecutionID, p *OperatorSignalParams) (*ActionResult, error)
	// SetLaneState would pause or resume a lane: FlowFabric keeps no lane
	// state, so after checking the lane exists it answers ErrUnsupported.
	SetLaneState(ctx context.Context, lane, state string) error
}

// ListExecutionsParams filter and page Inspector.ListExecutions.
type ListExecutionsParams struct {
	// Lane keeps one lane ("" every lane); an unknown lane is ErrNotFound.
	Lane string
	// State keeps one state: a lane index (eligible, delayed, active,
	// suspended, terminal, blocked or blocked:<reason>) or a terminal
	// public state (completed, failed, cancelled, expired, skipped).
	State string
	// Flow keeps the members of one flow (a UUID).
	Flow string
	// Limit is the page size (1..1000, default 50).
	Limit int
	// Cursor continues a listing where the previous page's NextCursor
	// left it ("" from the start).
	Cursor string
	// Desc lists in reverse: on Valkey the last partition, lane and index
	// first, each index by descending score (terminal newest first); on
	// Postgres newest first.
	Desc bool
}

// Page fills Limit's default and returns the offset Cursor names; a
// limit out of range or a cursor no listing returned is ErrInvalidInput.
func (p *ListExecutionsParams) Page() (int64, error) {
	if p.Limit == 0 {
		p.Limit = 50
	}
	if p.Limit < 1 || p.Limit > 1000 {
		return 0, fmt.Errorf("%w: limit must be 1..1000, got %d", ErrInvalidInput, p.Limit)
	}
	if p.Cursor == "" {
		return 0, nil
	}
	off, err := strconv.ParseInt(p.Cursor, 10, 64)
	if err != nil || off < 0 {
		return 0, fmt.Errorf("%w: cursor %q is not one this API returned", ErrInvalidInput, p.Cursor)
	}
	return off, nil
}

// ListStates are the values ListExecutionsParams.State accepts.
func ListStates() []string {
	out := append([]string{"blocked"}, model.LaneIndexNames...)
	return append(out, model.PublicCompleted, model.PublicFailed, model.PublicCancelled, model.PublicExpired, model.PublicSkipped)
}

// ExecutionRow is one execution of a listing.
type ExecutionRow struct {
	ID        string `json:"id"`
	Lane      string `json:"lane"`
	State     string `json:"state"`
	Phase     string `json:"phase"`
	Kind      string `json:"kind"`
	Priority  int    `json:"priority"`
	Attempts  int    `json:"attempts"`
	CreatedAt int64  `json:"created_at_ms"`
	FlowID    string `json:"flow_id,omitempty"`
	Detail    string `json:"blocking_detail,omitempty"`
}

// ExecutionPage is one page of a listing.
type ExecutionPage struct {
	Executions []ExecutionRow `json:"executions"`
	// NextCursor continues the listing ("" when it is complete). It is a
	// position in the listing's order: executions that change state
	// between pages may be skipped or seen twice.
	NextCursor string `json:"next_cursor,omitempty"`
}

// AttemptDetail is one attempt of an execution.
type AttemptDetail struct {
	Index int `json:"index"`
	// Fields are the attempt record's fields (attempt_state, started_at,
	// ended_at, worker_id, ...).
	Fields map[string]string `json:"fields"`
	// Error is this attempt's own failure reason ("" when it did not
	// fail).
	Error string `json:"error,omitempty"`
	// Frames are the first frames of its output stream.
	Frames []Frame `json:"frames,omitempty"`
	// StreamClosed is the stream's close reason ("" while open or absent).
	StreamClosed string `json:"stream_closed,omitempty"`
}

// Frame is one stream entry or lease-history event. A lease event's
// fields are event (acquired, renewed, released, expired, reclaimed,
// revoked), reason (why a lease was released: completed,
// failed_retry_scheduled, failed_terminal, cancelled, worker_delay,
// suspend, waiting_children, expired:<why>), worker_id and ts (ms), with
// lease and attempt ids and epochs where the backend keeps them.
type Frame struct {
	ID     string            `json:"id"`
	Fields map[string]string `json:"fields"`
}

// WaitpointDetail is one waitpoint of an execution (without its token).
type WaitpointDetail struct {
	ID     string            `json:"id"`
	Fields map[string]string `json:"fields"`
}

// FlowMembership is an execution's place in its flow.
type FlowMembership struct {
	FlowID string `json:"flow_id"`
	// Upstream are the edges into the execution.
	Upstream []map[string]string `json:"upstream"`
	// DepsMeta is its dependency counters.
	DepsMeta map[string]string `json:"deps_meta,omitempty"`
}

// ExecutionDetail is everything the console shows of one execution.
type ExecutionDetail struct {
	ID   string            `json:"id"`
	Core map[string]string `json:"core"`
	// Payload is the first DetailPreviewBytes of the input payload,
	// Result of the result; PayloadBytes and ResultBytes are their full
	// sizes.
	Payload      string            `json:"payload_preview"`
	PayloadBytes int64             `json:"payload_bytes"`
	Result       string            `json:"result_preview,omitempty"`
	ResultBytes  int64             `json:"result_bytes"`
	Tags         map[string]string `json:"tags,omitempty"`
	Policy       string            `json:"policy,omitempty"`
	Lease        map[string]string `json:"lease,omitempty"`
	// LeaseHistory is the last DetailFrames lease events, oldest first.
	LeaseHistory []Frame           `json:"lease_history"`
	Attempts     []AttemptDetail   `json:"attempts"`
	Suspension   map[string]string `json:"suspension,omitempty"`
	Waitpoints   []WaitpointDetail `json:"waitpoints"`
	Flow         *FlowMembership   `json:"flow,omitempty"`
}

// Bounds of an ExecutionDetail.
const (
	// DetailPreviewBytes is how much of a payload or result it shows.
	DetailPreviewBytes = 1024
	// DetailFrames is how many stream frames per attempt and lease events
	// it shows.
	DetailFrames = 50
)

// FlowEdge is one dependency edge of a flow.
type FlowEdge struct {
	ID         string `json:"id"`
	Upstream   string `json:"upstream"`
	Downstream string `json:"downstream"`
	Kind       string `json:"kind"`
	// State is the edge record's edge_state as stored: on Valkey
	// FlowFabric writes "pending" once and never updates it; on Postgres
	// "applied" once staged.
	State string `json:"state"`
	// Resolution is what the edge's upstream did to it, the same words on
	// both backends: "unsatisfied" (not resolved yet), "satisfied" (the
	// upstream succeeded) or "impossible" (it ended otherwise).
	Resolution string `json:"resolution"`
}

// FlowView is a flow's DAG: its record, members and edges.
type FlowView struct {
	ID    string            `json:"id"`
	Core  map[string]string `json:"core"`
	Nodes []ExecutionRow    `json:"nodes"`
	Edges []FlowEdge        `json:"edges"`
	// States counts the members per public state.
	States map[string]int `json:"states"`
	// SummaryState is the flow state the flow projector derived from its
	// members (completed, failed, running, blocked, open, ...), "" before
	// its first pass.
	SummaryState string `json:"summary_state,omitempty"`
}

// LaneCounts is one lane's executions by lane index.
type LaneCounts struct {
	Lane string `json:"lane"`
	// Counts are per lane index name (eligible, ..., blocked:operator).
	Counts map[string]int64 `json:"counts"`
	Total  int64            `json:"total"`
	// State is the lane's state: always "active" (FlowFabric keeps no
	// lane state, so a lane cannot be paused).
	State string `json:"state"`
	// Partitioner is the lane's solo partitioner on Valkey
	// (model.LaneConfigKey): "crc16" or "spread"; "" on Postgres.
	Partitioner string `json:"partitioner,omitempty"`
	// SpreadPartitions is how many partitions a spread lane places its
	// executions on (0 for crc16).
	SpreadPartitions int `json:"spread_partitions,omitempty"`
	// Partitions is how many partitions hold any of the lane's
	// executions (Valkey; 0 on Postgres).
	Partitions int `json:"partitions"`
	// Nodes counts the lane's executions per Valkey node (host:port on a
	// cluster), nodes without any left out.
	Nodes map[string]int64 `json:"nodes,omitempty"`
}

// WorkerInfo is one registered worker instance.
type WorkerInfo struct {
	InstanceID string `json:"instance_id"`
	WorkerID   string `json:"worker_id"`
	// Alive reports the liveness (false: the registration lapsed).
	Alive        bool     `json:"alive"`
	Lanes        []string `json:"lanes"`
	Capabilities []string `json:"capabilities"`
	// LastHeartbeatMs and RegisteredAtMs are the worker's clock.
	LastHeartbeatMs int64 `json:"last_heartbeat_ms"`
	RegisteredAtMs  int64 `json:"registered_at_ms"`
	TTLMs           int64 `json:"ttl_ms"`
	// Leases counts the executions it holds a lease on.
	Leases int64 `json:"leases"`
}

// ActionResult is what an operator action did.
type ActionResult struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	// Detail is the action's reply (the phase cancelled from, the new
	// priority, the signal's effect, ...).
	Detail map[string]any `json:"detail"`
}

// OperatorSignalParams are the inputs of Inspector.OperatorSignal.
type OperatorSignalParams struct {
	// Name is matched against the resume condition. Required.
	Name string `json:"name"`
	// Payload is the signal's JSON payload ("": none, and the resumed
	// worker's ResumeSignal.Payload is nil).
	Payload string `json:"payload,omitempty"`
	// WaitpointID defaults to the execution's current waitpoint.
	WaitpointID string `json:"waitpoint_id,omitempty"`
	// IdempotencyKey deduplicates deliveries per waitpoint.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}
