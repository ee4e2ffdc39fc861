package backend

import (
	"context"

	"github.com/fabric-host/fabric/model"
)

// FlowDriver builds flows: a DAG of executions sharing one partition,
// whose members run once their parents' outcomes satisfy their join.
// Both drivers implement it; backendtest runs each operation on both.
type FlowDriver interface {
	// CreateFlow creates an empty, open flow on its flow partition;
	// creating an existing flow again changes nothing. A zero FlowID is
	// ErrInvalidInput.
	CreateFlow(ctx context.Context, p *CreateFlowParams) error
	// AddFlowMember makes Child, an execution already created on the
	// flow's partition, a member of the flow gated by Parents under the
	// join policy (Kind, K, OnSatisfied). A child with parents must be
	// created delayed so no worker claims it before its edges exist: the
	// call leaves it blocked by its dependencies, or eligible when the
	// parents that already finished satisfy the join, or skipped when
	// they make it impossible. Without parents the child is left as it
	// was created. A zero FlowID, a child or parent off the flow's
	// partition, or an unknown Kind is ErrInvalidInput and writes
	// nothing.
	AddFlowMember(ctx context.Context, p *AddFlowMemberParams) error
}

// CreateFlowParams are the inputs of FlowDriver.CreateFlow.
type CreateFlowParams struct {
	FlowID    model.UUID
	Kind      string
	Namespace string
	NowMs     int64
}

// AddFlowMemberParams are the inputs of FlowDriver.AddFlowMember.
type AddFlowMemberParams struct {
	FlowID model.UUID
	// Child is an execution of the flow's partition, already created
	// (delayed when it has parents).
	Child model.ExecutionID
	// Parents are the child's upstreams (success_only edges); none makes
	// it a root member.
	Parents []model.ExecutionID
	// Kind is the child's edge-group policy: edgegroup.KindAllOf (or ""),
	// KindAnyOf or KindQuorum, with K (quorum size) and OnSatisfied
	// (OnSatisfiedCancelRemaining or OnSatisfiedLetRun) for the last two.
	Kind        string
	K           int
	OnSatisfied string
	NowMs       int64
}

// What becomes of the parents still running once an any_of or quorum
// join is satisfied (AddFlowMemberParams.OnSatisfied).
const (
	OnSatisfiedCancelRemaining = "cancel_remaining"
	OnSatisfiedLetRun          = "let_run"
)
