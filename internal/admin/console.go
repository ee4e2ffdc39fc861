package admin

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Errors of the console: the API answers ErrNotFound with 404,
// ErrBadRequest with 400, ErrConflict with 409 and ErrUnsupported with
// 501. They are the backend contract's sentinels, which both drivers'
// Inspector answers.
var (
	ErrNotFound    = backend.ErrNotFound
	ErrBadRequest  = backend.ErrInvalidInput
	ErrConflict    = backend.ErrConflict
	ErrUnsupported = backend.ErrUnsupported
)

// The console's views are the backend contract's (backend/inspector.go).
type (
	// ListQuery filters and pages an execution listing.
	ListQuery = backend.ListExecutionsParams
	// ExecutionRow is one execution of a listing.
	ExecutionRow = backend.ExecutionRow
	// ExecutionPage is one page of a listing.
	ExecutionPage = backend.ExecutionPage
	// ExecutionDetail is everything the console shows of one execution.
	ExecutionDetail = backend.ExecutionDetail
	// Attempt is one attempt of an execution.
	Attempt = backend.AttemptDetail
	// Frame is one stream entry or lease-history event.
	Frame = backend.Frame
	// Waitpoint is one waitpoint of an execution (without its token).
	Waitpoint = backend.WaitpointDetail
	// FlowMembership is an execution's place in its flow.
	FlowMembership = backend.FlowMembership
	// FlowView is a flow's DAG.
	FlowView = backend.FlowView
	// FlowEdge is one dependency edge of a flow.
	FlowEdge = backend.FlowEdge
	// LaneCounts is one lane's executions by index.
	LaneCounts = backend.LaneCounts
	// WorkerInfo is one registered worker instance.
	WorkerInfo = backend.WorkerInfo
	// ActionResult is what an operator action did.
	ActionResult = backend.ActionResult
	// SignalRequest is an operator's signal to a suspended execution.
	SignalRequest = backend.OperatorSignalParams
)

// ListStates are the values ListQuery.State accepts.
func ListStates() []string { return backend.ListStates() }

// Console is the ConsoleBackend of any deployment: it parses the API's
// ids and hands each read and action to the backend contract's
// Inspector, which both drivers implement (valkey.NewDriver,
// postgres.NewDriver).
type Console struct {
	in backend.Inspector
}

// NewConsole returns a Console over in.
func NewConsole(in backend.Inspector) *Console { return &Console{in: in} }

// ParseID parses an execution id for the console (ErrBadRequest).
func ParseID(s string) (model.ExecutionID, error) {
	eid, err := model.ParseExecutionID(s)
	if err != nil {
		return "", fmt.Errorf("%w: execution id %q: %v", ErrBadRequest, s, err)
	}
	return eid, nil
}

// ListExecutions lists one page of executions (backend.Inspector).
func (cs *Console) ListExecutions(ctx context.Context, q ListQuery) (*ExecutionPage, error) {
	return cs.in.ListExecutions(ctx, &q)
}

// Execution reads one execution; an unknown one is ErrNotFound.
func (cs *Console) Execution(ctx context.Context, id string) (*ExecutionDetail, error) {
	eid, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	return cs.in.InspectExecution(ctx, eid)
}

// Flow reads a flow's DAG; an unknown one is ErrNotFound.
func (cs *Console) Flow(ctx context.Context, id string) (*FlowView, error) {
	u, err := model.ParseUUID(id)
	if err != nil {
		return nil, fmt.Errorf("%w: flow id %q: %v", ErrBadRequest, id, err)
	}
	return cs.in.InspectFlow(ctx, u)
}

// Lanes counts each lane's executions per index.
func (cs *Console) Lanes(ctx context.Context) ([]LaneCounts, error) { return cs.in.InspectLanes(ctx) }

// Workers lists the worker instances registered in namespace ns.
func (cs *Console) Workers(ctx context.Context, ns string) ([]WorkerInfo, error) {
	return cs.in.InspectWorkers(ctx, ns)
}

// Cancel cancels an execution as an operator.
func (cs *Console) Cancel(ctx context.Context, id, reason string) (*ActionResult, error) {
	eid, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	return cs.in.OperatorCancel(ctx, eid, reason)
}

// Replay re-runs an ended execution.
func (cs *Console) Replay(ctx context.Context, id string) (*ActionResult, error) {
	eid, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	return cs.in.OperatorReplay(ctx, eid)
}

// Priority changes an eligible execution's priority (0..9000).
func (cs *Console) Priority(ctx context.Context, id string, priority int) (*ActionResult, error) {
	if priority < 0 || priority > model.PriorityMax {
		return nil, fmt.Errorf("%w: priority must be 0..%d, got %d", ErrBadRequest, model.PriorityMax, priority)
	}
	eid, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	return cs.in.OperatorPriority(ctx, eid, priority)
}

// Signal delivers a signal to an execution's waitpoint.
func (cs *Console) Signal(ctx context.Context, id string, s SignalRequest) (*ActionResult, error) {
	if s.Name == "" {
		return nil, fmt.Errorf("%w: a signal needs a name", ErrBadRequest)
	}
	eid, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	return cs.in.OperatorSignal(ctx, eid, &s)
}

// SetLaneState would pause or resume a lane: ErrUnsupported for a known
// lane (FlowFabric keeps no lane state), ErrNotFound otherwise.
func (cs *Console) SetLaneState(ctx context.Context, lane, state string) error {
	return cs.in.SetLaneState(ctx, lane, state)
}
