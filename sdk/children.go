package sdk

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Flow returns a handle on an existing flow (e.g. the flow of a running
// job, Job.FlowID), to add members to it.
func (c *Client) Flow(id model.UUID) *Flow { return &Flow{ID: id, c: c} }

// FlowID returns the flow the job's execution belongs to (the zero UUID
// for an execution outside any flow).
func (j *Job) FlowID() model.UUID {
	id, _ := model.ParseUUID(j.lease.flow)
	return id
}

// WaitForChildren makes the job wait for child executions it created in
// its own flow (Client.Flow(job.FlowID()).Add): each child becomes a
// dependency of the job (success_only), the lease is released
// (backend.ChildrenDriver; ff_move_to_waiting_children on Valkey, public
// state waiting_children), and the
// job is claimed again once every child succeeded; if one fails, the job
// is skipped. After a nil return the handler's result is ignored.
//
// Children that finished before the call count: the job does not wait
// for them. Workers completing the children must resolve their edges
// (WorkerConfig.ResolveDependencies or the host's dependency
// dispatcher; on Postgres pg_dependency_reconciler).
func (j *Job) WaitForChildren(ctx context.Context, children ...model.ExecutionID) error {
	l := j.lease
	flow := j.FlowID()
	if flow.IsZero() {
		return invalid("children", "execution %s is not a flow member; create it with Flow.Add", l.ID)
	}
	if len(children) == 0 {
		return invalid("children", "at least one child is required")
	}
	for _, ch := range children {
		if _, err := model.ParseExecutionID(string(ch)); err != nil || ch.Partition() != l.ID.Partition() || ch == l.ID {
			return invalid("children", "%s is not another execution of flow %s", ch, flow)
		}
	}
	if err := l.begin(); err != nil {
		return err
	}
	_, err := l.w.drv.WaitForChildren(ctx, &backend.WaitForChildrenParams{ExecutionID: l.ID, Fence: l.fence,
		Holder: backend.Holder{LaneID: l.Lane, WorkerInstanceID: l.w.cfg.InstanceID}, FlowID: flow,
		Children: children, NowMs: l.w.cfg.Clock().UnixMilli()})
	if err != nil {
		// Not waiting: the lease stays open unless the error says it is
		// gone (as after a refused suspend).
		l.settle(err)
		return fmt.Errorf("sdk: wait for children of %s: %w", l.ID, err)
	}
	l.end()
	return nil
}
