package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
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
// (ff_move_to_waiting_children, public state waiting_children), and the
// job is claimed again once every child succeeded; if one fails, the job
// is skipped. After a nil return the handler's result is ignored.
//
// Children that finished before the call count: the job does not wait
// for them. Workers completing the children must resolve their edges
// (WorkerConfig.ResolveDependencies or the host's dependency
// dispatcher).
func (j *Job) WaitForChildren(ctx context.Context, children ...model.ExecutionID) error {
	l := j.lease
	if l.w.pg != nil {
		return errNotOnPostgres("Job.WaitForChildren")
	}
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
	w := l.w
	f := &Flow{ID: flow, c: &Client{vc: w.vc, parts: w.parts, ns: l.Namespace, clock: w.cfg.Clock, log: w.log}}
	edges := make([]*valkey.EdgeParams, len(children))
	for i, ch := range children {
		ep, err := f.stage(ctx, ch, l.ID)
		if err != nil {
			return err
		}
		edges[i] = ep
	}
	if _, err := w.vc.ApplyDependenciesToChild(ctx, l.ID, edges); err != nil {
		return fmt.Errorf("sdk: %w", err)
	}
	if err := l.finishCall(ctx, "wait for children", "", func(ctx context.Context) error {
		return w.vc.MoveToWaitingChildren(ctx, &valkey.MoveToWaitingChildrenParams{ExecutionID: l.ID, Fence: l.fence})
	}); err != nil {
		return err
	}
	// Children that finished before their edge existed, or while the job
	// was still active, resolved nothing that could wake it: resolve the
	// former now, and promote the job if nothing is left to wait for. The
	// handler's context ended with the lease: these calls get their own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, e := range edges {
		if err := f.resolveFinished(ctx, e); err != nil {
			return err
		}
	}
	st, err := w.vc.EvaluateFlowEligibility(ctx, l.ID)
	if err != nil {
		return fmt.Errorf("sdk: %w", err)
	}
	if st == "eligible" {
		err := w.vc.PromoteBlockedToEligible(ctx, l.ID, w.cfg.Clock().UnixMilli())
		if err != nil && valkey.CodeOf(err) != "not_blocked_by_deps" { // already eligible: resolved above
			return fmt.Errorf("sdk: %w", err)
		}
	}
	return nil
}
