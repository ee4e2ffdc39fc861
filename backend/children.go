package backend

import (
	"context"
	"fmt"

	"github.com/fabric-host/fabric/model"
)

// ChildrenDriver is the part of ControlDriver that makes a flow member's
// lease holder wait for child executions it added to its own flow
// (FlowFabric's move to waiting children).
type ChildrenDriver interface {
	// WaitForChildren makes each child an upstream of the fenced
	// execution (success_only edges, all of them required), releases the
	// lease and blocks the execution on them (public state
	// waiting_children). Once every child succeeded it is claimable
	// again, the same attempt ("resumed"); if one cannot succeed it ends
	// skipped. Children that finished before the call count at once
	// (Eligible when they all succeeded). A fence that no longer holds
	// the lease is ErrLeaseGone; children that are not other executions
	// of the execution's flow are ErrInvalidInput.
	WaitForChildren(ctx context.Context, p *WaitForChildrenParams) (*WaitForChildrenResult, error)
}

// WaitForChildrenParams are the inputs of ChildrenDriver.WaitForChildren.
type WaitForChildrenParams struct {
	ExecutionID model.ExecutionID
	Fence       Fence
	Holder      Holder
	// FlowID is the execution's flow; Children are other members of it
	// (at least one, each once).
	FlowID   model.UUID
	Children []model.ExecutionID
	// NowMs stamps the edges (the caller's clock).
	NowMs int64
}

// ValidateChildren checks p's flow and children as both drivers do
// before writing anything; the error wraps ErrInvalidInput.
func (p *WaitForChildrenParams) ValidateChildren() error {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil {
		return fmt.Errorf("%w: wait for children: %v", ErrInvalidInput, err)
	}
	if p.FlowID.IsZero() || len(p.Children) == 0 {
		return fmt.Errorf("%w: wait for children of %s: a flow and at least one child are required", ErrInvalidInput, p.ExecutionID)
	}
	seen := map[model.ExecutionID]bool{}
	for _, ch := range p.Children {
		if _, err := model.ParseExecutionID(string(ch)); err != nil || ch == p.ExecutionID || seen[ch] ||
			ch.Partition() != p.ExecutionID.Partition() {
			return fmt.Errorf("%w: wait for children of %s: %s is not another execution of flow %s", ErrInvalidInput,
				p.ExecutionID, ch, p.FlowID)
		}
		seen[ch] = true
	}
	return nil
}

// WaitForChildrenResult is the outcome of ChildrenDriver.WaitForChildren.
type WaitForChildrenResult struct {
	// Eligible: every child had already succeeded; the execution is
	// claimable again at once.
	Eligible bool
}
