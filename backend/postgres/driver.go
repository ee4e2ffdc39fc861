package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Driver is the Postgres implementation of backend.Driver over a Client.
// Create it with NewDriver.
type Driver struct {
	c *Client
	// fullSweepEvery overrides the claimers' fullSweepEvery (tests).
	fullSweepEvery int
}

var _ backend.Driver = (*Driver)(nil)

// NewDriver returns the backend.Driver of c.
func NewDriver(c *Client) *Driver { return &Driver{c: c} }

// Client returns the client the driver runs on.
func (d *Driver) Client() *Client { return d.c }

// IsTransient implements backend.Driver: a transport failure
// (backend.NetworkTransient), or a transaction Postgres aborted for a
// moment — a serialization failure or a deadlock (SQLSTATE 40001,
// 40P01), an administrator's or a crash's shutdown of the connection
// (57P01, 57P02, 57P03) — a call a retry may pass.
func (d *Driver) IsTransient(err error) bool {
	if backend.NetworkTransient(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "57P01", "57P02", "57P03":
			return true
		}
	}
	return false
}

// Name implements backend.Driver.
func (d *Driver) Name() string { return "postgres" }

// Partitions implements backend.Driver.
func (d *Driver) Partitions() model.PartitionConfig { return d.c.Partitions() }

// mapErr wraps err with the backend sentinel its code means, keeping err
// in the chain. fenced is set for operations checked against a lease
// fence: there a missing or inactive execution means the lease is gone.
func mapErr(err error, fenced bool) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, ErrNotMigrated), errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
		return fmt.Errorf("%w: %w", backend.ErrNotMigrated, err)
	case errors.Is(err, CodeExecutionNotFound):
		if fenced {
			return fmt.Errorf("%w: %w: %w", backend.ErrLeaseGone, backend.ErrNotFound, err)
		}
		return fmt.Errorf("%w: %w", backend.ErrNotFound, err)
	case errors.Is(err, CodeStaleLease), errors.Is(err, CodeLeaseExpired):
		return fmt.Errorf("%w: %w", backend.ErrLeaseGone, err)
	case errors.Is(err, CodeExecutionNotActive):
		if fenced {
			return fmt.Errorf("%w: %w", backend.ErrLeaseGone, err)
		}
		return fmt.Errorf("%w: %w", backend.ErrTerminal, err)
	case errors.Is(err, CodeExecutionNotEligible):
		return fmt.Errorf("%w: %w", backend.ErrNotClaimable, err)
	case errors.Is(err, CodeCapabilityMismatch):
		return fmt.Errorf("%w: %w", backend.ErrCapabilityMismatch, err)
	case errors.Is(err, CodeInvalidInput), errors.Is(err, CodeInvalidPolicyJSON):
		return fmt.Errorf("%w: %w", backend.ErrInvalidInput, err)
	case errors.Is(err, CodeExecutionConflict):
		return fmt.Errorf("%w: %w", backend.ErrConflict, err)
	}
	return err
}

// requiredCapabilities reads routing_requirements.required_capabilities
// of an ExecutionPolicy document (nil when absent or not JSON; create
// rejects a document that is not JSON).
func requiredCapabilities(policy string) []string {
	if policy == "" {
		return nil
	}
	var doc struct {
		Routing *struct {
			Required []string `json:"required_capabilities"`
		} `json:"routing_requirements"`
	}
	if json.Unmarshal([]byte(policy), &doc) != nil || doc.Routing == nil {
		return nil
	}
	return doc.Routing.Required
}

// CreateExecution implements backend.Driver. With an IdempotencyKey the
// id is backend.IdempotentExecutionID of the namespace and key (Postgres
// keeps no idempotency index): a repeat lands on the same row.
func (d *Driver) CreateExecution(ctx context.Context, p *backend.CreateExecutionParams) (*backend.CreateExecutionResult, error) {
	return d.create(ctx, d.c.pool, p)
}

// CreateExecutionTx implements backend.Driver: CreateExecution's
// statements run on the caller's pgx.Tx (a flow member's flow in a
// savepoint of it), so the row commits or rolls back with the caller's
// own writes; the row's trigger NOTIFYs eligible workers, which Postgres
// delivers at the commit.
func (d *Driver) CreateExecutionTx(ctx context.Context, tx any, p *backend.CreateExecutionParams) (*backend.CreateExecutionResult, error) {
	t, ok := tx.(pgx.Tx)
	if !ok || t == nil {
		return nil, fmt.Errorf("%w: create in a transaction: want a pgx.Tx of this database, got %T", backend.ErrInvalidInput, tx)
	}
	return d.create(ctx, t, p)
}

// create is CreateExecution on db (the pool or a caller's transaction).
func (d *Driver) create(ctx context.Context, db createDB, p *backend.CreateExecutionParams) (*backend.CreateExecutionResult, error) {
	// Checked before the flow is created (the client checks again).
	if err := backend.ValidateCreateExecution(p, d.c.maxPayload, d.c.nowMs()); err != nil {
		return nil, err
	}
	id := p.ExecutionID
	if p.IdempotencyKey != "" {
		id = backend.IdempotentExecutionID(id.Partition(), p.Namespace, p.IdempotencyKey)
	}
	if !p.FlowID.IsZero() && p.LaneID != "" {
		// The flow is created when absent, as on Valkey (an existing one
		// is left as it is); a member off the flow's partition is refused
		// first.
		if _, err := model.ParseExecutionID(string(id)); err != nil || id.Partition() != d.c.parts.FlowPartition(p.FlowID) {
			return nil, mapErr(fmt.Errorf("create execution %s: %w: not on flow %s's partition", id, CodeInvalidInput, p.FlowID), false)
		}
		if err := d.c.createFlow(ctx, db, &CreateFlowParams{FlowID: p.FlowID, Kind: p.FlowKind, Namespace: p.Namespace,
			NowMs: d.c.nowMs()}); err != nil {
			return nil, mapErr(err, false)
		}
	}
	q := *p
	q.ExecutionID = id
	res, err := d.c.createExecution(ctx, db, &q)
	if err != nil {
		return nil, mapErr(err, false)
	}
	out := &backend.CreateExecutionResult{ExecutionID: id, Duplicate: res.Duplicate}
	if !res.Duplicate {
		out.PublicState = res.PublicState
	}
	return out, nil
}

// CreateExecutions implements backend.Driver: one transaction per item.
func (d *Driver) CreateExecutions(ctx context.Context, ps []*backend.CreateExecutionParams) ([]*backend.CreateExecutionResult, error) {
	out := make([]*backend.CreateExecutionResult, len(ps))
	var errs []error
	for i, p := range ps {
		r, err := d.CreateExecution(ctx, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("item %d: %w", i, err))
			continue
		}
		out[i] = r
	}
	return out, errors.Join(errs...)
}

func claimOut(r *ClaimResult) *backend.ClaimResult {
	return &backend.ClaimResult{ExecutionID: r.ExecutionID,
		Fence:     r.Fence(),
		ExpiresAt: r.ExpiresAt, AttemptType: r.AttemptType, LaneID: r.LaneID, Kind: r.Kind,
		Namespace: r.Namespace, Payload: r.Payload, FlowID: r.FlowID}
}

// ClaimNext implements backend.Driver (ClaimForWorker).
func (d *Driver) ClaimNext(ctx context.Context, p *backend.ClaimNextParams) (*backend.ClaimResult, error) {
	r, err := d.c.ClaimForWorker(ctx, p)
	if errors.Is(err, CodeNoEligibleExecution) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err, false)
	}
	return claimOut(r), nil
}

// ClaimExecution implements backend.Driver.
func (d *Driver) ClaimExecution(ctx context.Context, p *backend.ClaimExecutionParams) (*backend.ClaimResult, error) {
	r, err := d.c.ClaimExecution(ctx, p)
	if err != nil {
		return nil, mapErr(err, false)
	}
	return claimOut(r), nil
}

// RenewLease implements backend.Driver.
func (d *Driver) RenewLease(ctx context.Context, p *backend.RenewLeaseParams) (int64, error) {
	exp, err := d.c.RenewLease(ctx, p)
	return exp, mapErr(err, true)
}

// CompleteExecution implements backend.Driver.
func (d *Driver) CompleteExecution(ctx context.Context, p *backend.CompleteExecutionParams) error {
	return mapErr(d.c.CompleteExecution(ctx, p), true)
}

// FailExecution implements backend.Driver.
func (d *Driver) FailExecution(ctx context.Context, p *backend.FailExecutionParams) (*backend.FailResult, error) {
	r, err := d.c.FailExecution(ctx, p)
	if err != nil {
		return nil, mapErr(err, true)
	}
	return r, nil
}

// DelayExecution implements backend.Driver.
func (d *Driver) DelayExecution(ctx context.Context, p *backend.DelayExecutionParams) error {
	return mapErr(d.c.DelayExecution(ctx, p), true)
}

// CancelExecution implements backend.Driver (cancelled_by
// operator_override).
func (d *Driver) CancelExecution(ctx context.Context, p *backend.CancelExecutionParams) error {
	_, err := d.c.CancelExecution(ctx, &CancelExecutionParams{ExecutionID: p.ExecutionID, Reason: p.Reason,
		Source: "operator_override"})
	return mapErr(err, false)
}

// ExecutionState implements backend.Driver (ExecutionFields).
func (d *Driver) ExecutionState(ctx context.Context, id model.ExecutionID) (*backend.ExecutionState, error) {
	m, err := d.c.ExecutionFields(ctx, id)
	if err != nil {
		return nil, mapErr(err, false)
	}
	s := backend.StateFromFields(id, m)
	if s.PublicState == pgPublicRunning {
		s.PublicState = model.PublicActive
	}
	return s, nil
}

// pgPublicRunning is the public_state upstream's Postgres claim writes for
// a leased execution (spec postgres.md §3) where Valkey writes "active";
// ExecutionState reports it as model.PublicActive (Fields keeps the
// stored value).
const pgPublicRunning = "running"

// ExecutionResult implements backend.Driver.
func (d *Driver) ExecutionResult(ctx context.Context, id model.ExecutionID) ([]byte, error) {
	b, err := d.c.ExecutionResult(ctx, id)
	return b, mapErr(err, false)
}

// SubscribeCompletions implements backend.Driver over the client's LISTEN
// subscription from the tail, passing on flow members' events only.
func (d *Driver) SubscribeCompletions(ctx context.Context, p *backend.SubscribeCompletionsParams) (backend.CompletionSubscription, error) {
	buf := p.Buffer
	if buf <= 0 {
		buf = 1024
	}
	sub, err := d.c.SubscribeCompletions(ctx, &SubscribeCompletionsParams{AfterEventID: -1, Buffer: buf})
	if err != nil {
		return nil, mapErr(err, false)
	}
	s := &pgCompletions{sub: sub, out: make(chan backend.Completion, buf), done: make(chan struct{})}
	go s.forward()
	return s, nil
}

// pgCompletions adapts a CompletionSubscription to
// backend.CompletionSubscription.
type pgCompletions struct {
	sub  *CompletionSubscription
	out  chan backend.Completion
	done chan struct{}
	once sync.Once
}

func (s *pgCompletions) forward() {
	defer close(s.out)
	for ev := range s.sub.C {
		if ev.FlowID.IsZero() {
			continue
		}
		select {
		case s.out <- backend.Completion{ExecutionID: ev.ExecutionID, FlowID: ev.FlowID, Outcome: ev.Outcome}:
		case <-s.done:
			return
		}
	}
}

// C implements backend.CompletionSubscription.
func (s *pgCompletions) C() <-chan backend.Completion { return s.out }

// Close implements backend.CompletionSubscription.
func (s *pgCompletions) Close() {
	s.once.Do(func() { close(s.done) })
	s.sub.Close()
	for range s.out { // wait for forward to end
	}
}

// Err implements backend.CompletionSubscription.
func (s *pgCompletions) Err() error { return mapErr(s.sub.Err(), false) }
