package backend

import (
	"context"
	"errors"

	"github.com/fabric-host/fabric/model"
)

// ErrPeriodicNotFound: the periodic schedule does not exist.
var ErrPeriodicNotFound = errors.New("backend: periodic schedule not found")

// PeriodicDriver stores periodic schedules and fires their due ticks.
// A schedule lives on its lane's solo partition; each tick creates one
// execution, whose id is derived from the schedule name and the tick
// (periodic.TickID), exactly once however many hosts fire it.
type PeriodicDriver interface {
	// AddPeriodic stores s, replacing a schedule of the same name
	// wherever it lived. The caller has validated it and computed its
	// first tick (NextDueMs).
	AddPeriodic(ctx context.Context, s *PeriodicSchedule) error
	// RemovePeriodic deletes a schedule; executions it created are not
	// touched. A missing name is ErrPeriodicNotFound.
	RemovePeriodic(ctx context.Context, name string) error
	// ListPeriodic returns every schedule, sorted by name.
	ListPeriodic(ctx context.Context) ([]PeriodicSchedule, error)
	// FirePeriodic fires the ticks of one partition's schedules due at
	// NowMs (what the periodic scanner plugin does on each scan): each
	// due tick's execution is created and its schedule advanced; ticks
	// another firer took meanwhile are skipped.
	FirePeriodic(ctx context.Context, p *FirePeriodicParams) (*FirePeriodicResult, error)
}

// PeriodicSchedule is one stored schedule: its timing, the template of
// the executions it creates, and its last fired tick.
type PeriodicSchedule struct {
	Name string
	// LaneID, ExecutionKind, Namespace, Payload, Priority, PolicyJSON and
	// Tags are those of every created execution (CreatorIdentity is the
	// schedule's Creator).
	LaneID, ExecutionKind, Namespace string
	Payload                          []byte
	Priority                         int
	PolicyJSON                       string
	Tags                             map[string]string
	// EveryMs (ticks at AnchorMs + n*EveryMs) or Cron (UTC), exactly
	// one.
	EveryMs  int64
	Cron     string
	AnchorMs int64
	// NextDueMs is the next tick, 0 when the schedule has none left.
	NextDueMs int64
	// LastTickMs and LastExecutionID describe the last fired tick (zero
	// before the first).
	LastTickMs      int64
	LastExecutionID model.ExecutionID
	CreatedAtMs     int64
	Creator         string
}

// FirePeriodicParams are the inputs of PeriodicDriver.FirePeriodic.
type FirePeriodicParams struct {
	// Partition is the index of the (flow-family) partition to fire.
	Partition uint16
	NowMs     int64
	// Limit bounds the schedules read; 0 means 100.
	Limit int
}

// FirePeriodicResult is the outcome of PeriodicDriver.FirePeriodic.
type FirePeriodicResult struct {
	// Fired are the executions this call created, in firing order.
	Fired []model.ExecutionID
	// NextDueMs is the partition's earliest tick afterwards, 0 when none.
	NextDueMs int64
}
