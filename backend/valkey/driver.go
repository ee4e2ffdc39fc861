package valkey

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Driver is the Valkey implementation of backend.Driver over a Client
// (the flowfabric library and fabric's own functions). Create it with
// NewDriver.
type Driver struct {
	c     *Client
	parts model.PartitionConfig
	// lanes are the lanes this driver (and its WithPartitions copies)
	// registered in the lane registry (model.KeyLanesIndex), so each
	// costs one SADD per driver, not one per create.
	lanes *sync.Map
}

var _ backend.Driver = (*Driver)(nil)

// NewDriver returns the backend.Driver of c, on c's partition config.
func NewDriver(c *Client) *Driver {
	d := &Driver{c: c, lanes: &sync.Map{}}
	if c != nil {
		d.parts = c.Partitions()
	}
	return d
}

// WithPartitions returns a copy of d on parts, the deployment's partition
// config as read from ff:config:partitions (the SDK's clients read it at
// connect), where a lane's solo partition and a flow's partition are
// computed.
func (d *Driver) WithPartitions(parts model.PartitionConfig) *Driver {
	c := *d
	c.parts = parts
	return &c
}

// Client returns the client the driver runs on.
func (d *Driver) Client() *Client { return d.c }

// Name implements backend.Driver.
func (d *Driver) Name() string { return "valkey" }

// Partitions implements backend.Driver.
func (d *Driver) Partitions() model.PartitionConfig { return d.parts }

// driverClaimHeads is how many eligible heads ClaimNext reads per
// partition: enough that heads needing capabilities the worker lacks, or
// taken by other workers, do not hide a claimable one.
const driverClaimHeads = 16

// driverGrantTTLMs is the claim-grant lifetime of the driver's claims
// (the SDK's GrantTTL).
const driverGrantTTLMs = 5000

// mapErr wraps err with the backend sentinel its library code means,
// keeping err (and its *LuaError) in the chain. fenced is set for
// operations checked against a lease fence: there a missing or inactive
// execution means the lease is gone.
func mapErr(err error, fenced bool) error {
	if err == nil {
		return nil
	}
	var code ErrorCode
	if !errors.As(err, &code) {
		code = CodeOf(err)
	}
	var s error
	switch code {
	case CodeExecutionNotFound:
		if fenced {
			return fmt.Errorf("%w: %w: %w", backend.ErrLeaseGone, backend.ErrNotFound, err)
		}
		s = backend.ErrNotFound
	case CodeStaleLease, CodeLeaseExpired, CodeLeaseRevoked, CodeNoActiveLease:
		s = backend.ErrLeaseGone
	case CodeExecutionNotActive:
		s = backend.ErrTerminal
		if fenced {
			s = backend.ErrLeaseGone
		}
	case CodeCapabilityMismatch:
		s = backend.ErrCapabilityMismatch
	case CodeExecutionNotEligible, CodeExecutionNotInEligibleSet, CodeExecutionNotLeaseable,
		CodeActiveAttemptExists, CodeLeaseConflict:
		s = backend.ErrNotClaimable
	case CodeInvalidInput, CodeInvalidPolicyJSON, CodePartialFenceTriple, CodeFenceRequired,
		CodeInvalidCapabilities:
		s = backend.ErrInvalidInput
	case CodeExecutionConflict:
		s = backend.ErrConflict
	default:
		return err
	}
	return fmt.Errorf("%w: %w", s, err)
}

func nowMs() int64 { return time.Now().UnixMilli() }

// createParams is p as ff_create_execution's inputs.
func createParams(p *backend.CreateExecutionParams) *CreateExecutionParams {
	return &CreateExecutionParams{ExecutionID: p.ExecutionID, Namespace: p.Namespace, LaneID: p.LaneID,
		ExecutionKind: p.ExecutionKind, Priority: p.Priority, CreatorIdentity: p.CreatorIdentity,
		PolicyJSON: p.PolicyJSON, Payload: string(p.Payload), DelayUntil: p.DelayUntil,
		IdempotencyKey: p.IdempotencyKey, Tags: p.Tags, ExecutionDeadlineAt: p.ExecutionDeadlineAt}
}

// validCreate checks p before anything is written (the lane's
// registration, a flow's creation, the create): backend's checks with the
// client's payload limit and this host's clock.
func (d *Driver) validCreate(p *backend.CreateExecutionParams) error {
	return backend.ValidateCreateExecution(p, d.c.maxPayload, nowMs())
}

// CreateExecution implements backend.Driver: the lane is registered
// (ff:idx:lanes), a flow member's flow created when absent
// (ff_create_flow), the execution created (ff_create_execution) and added
// to its flow (ff_add_execution_to_flow).
func (d *Driver) CreateExecution(ctx context.Context, p *backend.CreateExecutionParams) (*backend.CreateExecutionResult, error) {
	rs, err := d.CreateExecutions(ctx, []*backend.CreateExecutionParams{p})
	if err != nil {
		// One item: unwrap the "item 0" naming.
		var j interface{ Unwrap() []error }
		if errors.As(err, &j) && len(j.Unwrap()) == 1 {
			err = errors.Unwrap(j.Unwrap()[0])
		}
		return nil, err
	}
	return rs[0], nil
}

// CreateExecutions implements backend.Driver: the creates are pipelined
// in one round trip (after the lanes' registration and the flows'
// creation), then flow members are added to their flows.
func (d *Driver) CreateExecutions(ctx context.Context, ps []*backend.CreateExecutionParams) ([]*backend.CreateExecutionResult, error) {
	out := make([]*backend.CreateExecutionResult, len(ps))
	errs := make([]error, len(ps))
	var lanes []string
	var calls []Call
	var sent []int
	for i, p := range ps {
		if errs[i] = d.validCreate(p); errs[i] != nil {
			continue
		}
		if _, seen := d.lanes.Load(p.LaneID); !seen && !slices.Contains(lanes, p.LaneID) {
			lanes = append(lanes, p.LaneID)
		}
		if !p.FlowID.IsZero() {
			if d.parts.FlowPartition(p.FlowID) != p.ExecutionID.Partition() {
				errs[i] = fmt.Errorf("%w: create execution %s: %w", backend.ErrInvalidInput, p.ExecutionID, ErrWrongFlowPartition)
				continue
			}
			if _, err := d.c.CreateFlow(ctx, p.FlowID, p.FlowKind, p.Namespace, nowMs()); err != nil {
				errs[i] = mapErr(err, false)
				continue
			}
		}
		calls = append(calls, createParams(p).Call())
		sent = append(sent, i)
	}
	if len(lanes) > 0 {
		raw := d.c.Raw()
		if err := raw.Do(ctx, raw.B().Sadd().Key(model.KeyLanesIndex).Member(lanes...).Build()).Error(); err != nil {
			return out, fmt.Errorf("register lanes: %w", err)
		}
		for _, l := range lanes {
			d.lanes.Store(l, struct{}{})
		}
	}
	for j, r := range d.c.FCallBatch(ctx, calls) {
		i, p := sent[j], ps[sent[j]]
		if r.Err != nil {
			errs[i] = mapErr(fmt.Errorf("create execution %s: %w", p.ExecutionID, r.Err), false)
			continue
		}
		res := &backend.CreateExecutionResult{ExecutionID: model.ExecutionID(r.Reply.Field(0))}
		if r.Reply.Status == StatusDuplicate {
			res.Duplicate = true
		} else {
			res.PublicState = r.Reply.Field(1)
		}
		if !p.FlowID.IsZero() && !res.Duplicate {
			if _, _, err := d.c.AddExecutionToFlow(ctx, p.FlowID, res.ExecutionID, nowMs()); err != nil {
				errs[i] = mapErr(err, false)
				continue
			}
		}
		out[i] = res
	}
	var joined []error
	for i, err := range errs {
		if err != nil {
			joined = append(joined, fmt.Errorf("item %d: %w", i, err))
		}
	}
	return out, errors.Join(joined...)
}

// head is one eligible index member and its score (priority, then age).
type head struct {
	id    model.ExecutionID
	score float64
}

// heads reads up to n eligible heads of lane on each of
// parts in one round trip, best (lowest score) first across partitions.
func (d *Driver) heads(ctx context.Context, parts []uint16, lane string, n int64) ([]head, error) {
	raw := d.c.Raw()
	cmds := make(vk.Commands, len(parts))
	for i, p := range parts {
		key := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: p}).LaneEligible(lane)
		cmds[i] = raw.B().Zrange().Key(key).Min("-inf").Max("+inf").Byscore().Limit(0, n).Withscores().Build()
	}
	var out []head
	for i, r := range raw.DoMulti(ctx, cmds...) {
		zs, err := r.AsZScores()
		if err != nil {
			return nil, fmt.Errorf("read eligible heads of %s: %w", lane, err)
		}
		for _, z := range zs {
			id, err := model.ParseExecutionID(z.Member)
			if err != nil || id.Partition().Index != parts[i] {
				continue // the index reconciler cleans these up
			}
			out = append(out, head{id: id, score: z.Score})
		}
	}
	slices.SortStableFunc(out, func(a, b head) int { return cmp.Compare(a.score, b.score) })
	return out, nil
}

// skippable reports claim refusals that mean "not this one now":
// another worker got it, it moved on, or it needs other capabilities.
func skippable(err error) bool {
	code := CodeOf(err)
	return code != "" && (Retryable(code) || code == CodeExecutionNotFound ||
		code == CodeExecutionNotActive || code == CodeActiveAttemptExists)
}

// ClaimNext implements backend.Driver: it reads the lane's eligible heads
// (its solo partition first, then every partition, unless Partitions is
// given) and claims the best one it can with fabric_claim_execution
// (grant and claim in one call), skipping heads other workers took or
// that need capabilities the worker lacks.
func (d *Driver) ClaimNext(ctx context.Context, p *backend.ClaimNextParams) (*backend.ClaimResult, error) {
	if p.LaneID == "" || p.LeaseTTLMs <= 0 {
		return nil, fmt.Errorf("%w: claim next: lane and lease_ttl_ms > 0 are required", backend.ErrInvalidInput)
	}
	parts := d.parts
	passes := [][]uint16{{parts.SoloPartition(p.LaneID).Index}, nil}
	for i := range parts.Flow {
		passes[1] = append(passes[1], i)
	}
	if len(p.Partitions) > 0 {
		passes = [][]uint16{p.Partitions}
	}
	for _, pass := range passes {
		r, err := d.claimPass(ctx, p, pass)
		if r != nil || err != nil {
			return r, err
		}
	}
	return nil, nil
}

// driverClaimRounds bounds how often one ClaimNext pass reads heads
// again after losing every head it read to other workers.
const driverClaimRounds = 8

// claimPass claims the best head of parts. Heads other workers take leave
// the index, so after a round that lost them all the heads are read
// again (up to driverClaimRounds); heads skipped for good (capabilities
// the worker lacks) stay, and are not tried twice.
func (d *Driver) claimPass(ctx context.Context, p *backend.ClaimNextParams, parts []uint16) (*backend.ClaimResult, error) {
	skipped := map[model.ExecutionID]bool{}
	for range driverClaimRounds {
		hs, err := d.heads(ctx, parts, p.LaneID, driverClaimHeads+int64(len(skipped)))
		if err != nil {
			return nil, err
		}
		tried := 0
		for _, h := range hs {
			if skipped[h.id] {
				continue
			}
			tried++
			r, err := d.claim(ctx, h.id, p.LaneID, p.WorkerID, p.WorkerInstanceID, p.Capabilities, p.LeaseTTLMs)
			if err == nil {
				return r, nil
			}
			if !skippable(err) {
				return nil, mapErr(err, false)
			}
			if errors.Is(err, CodeCapabilityMismatch) {
				skipped[h.id] = true
			}
		}
		if tried == 0 {
			return nil, nil
		}
	}
	return nil, nil
}

// ClaimExecution implements backend.Driver: the execution's lane is read,
// then it is claimed as ClaimNext claims a head.
func (d *Driver) ClaimExecution(ctx context.Context, p *backend.ClaimExecutionParams) (*backend.ClaimResult, error) {
	if _, err := model.ParseExecutionID(string(p.ExecutionID)); err != nil || p.LeaseTTLMs <= 0 {
		return nil, fmt.Errorf("%w: claim execution %s: a valid id and lease_ttl_ms > 0 are required", backend.ErrInvalidInput, p.ExecutionID)
	}
	lane, err := d.c.schedHGet(ctx, model.KeysFor(p.ExecutionID).Core(), "lane_id")
	if err != nil {
		return nil, fmt.Errorf("claim execution %s: %w", p.ExecutionID, err)
	}
	if lane == "" {
		return nil, fmt.Errorf("claim execution %s: %w", p.ExecutionID, backend.ErrNotFound)
	}
	r, err := d.claim(ctx, p.ExecutionID, lane, p.WorkerID, p.WorkerInstanceID, p.Capabilities, p.LeaseTTLMs)
	if err != nil {
		err = mapErr(err, false)
		if !errors.Is(err, backend.ErrNotFound) && !errors.Is(err, backend.ErrCapabilityMismatch) &&
			!errors.Is(err, backend.ErrNotClaimable) && skippable(err) {
			err = fmt.Errorf("%w: %w", backend.ErrNotClaimable, err)
		}
		return nil, err
	}
	return r, nil
}

// claim claims one execution of lane: fabric_claim_execution, then, when
// it reports an interrupted attempt, ff_claim_resumed_execution with the
// grant it left; a grant that already existed (a scheduler's for this
// worker id) is claimed with ff_claim_execution.
func (d *Driver) claim(ctx context.Context, id model.ExecutionID, lane, worker, instance string, caps []string, ttl int64) (*backend.ClaimResult, error) {
	fr, err := d.c.ClaimWithGrant(ctx, &FabricClaimParams{Claim: ClaimExecutionParams{ExecutionID: id,
		WorkerID: worker, WorkerInstanceID: instance, LaneID: lane, LeaseTTLMs: ttl},
		GrantTTLMs: driverGrantTTLMs, WorkerCapabilities: caps, AttemptTimeoutFromPolicy: true})
	if err == nil {
		return &backend.ClaimResult{ExecutionID: id, Fence: fenceOut(&fr.ClaimResult), ExpiresAt: fr.ExpiresAt,
			AttemptType: fr.AttemptType, LaneID: cmp.Or(fr.Lane, lane), Kind: fr.Kind, Namespace: fr.Namespace,
			Payload: fr.Payload, FlowID: fr.FlowID}, nil
	}
	var cr *ClaimResult
	switch {
	case errors.Is(err, CodeUseClaimResumedExecution):
	case errors.Is(err, CodeGrantAlreadyExists):
		cr, err = d.c.ClaimExecution(ctx, &ClaimExecutionParams{ExecutionID: id, WorkerID: worker,
			WorkerInstanceID: instance, LaneID: lane, LeaseTTLMs: ttl})
		if err != nil && !errors.Is(err, CodeUseClaimResumedExecution) {
			return nil, err
		}
	default:
		return nil, err
	}
	if cr == nil {
		rr, err := d.c.ClaimResumedExecution(ctx, &ClaimResumedParams{ExecutionID: id, WorkerID: worker,
			WorkerInstanceID: instance, Lane: lane, LeaseID: model.NewUUID().String(), LeaseTTLMs: ttl})
		if err != nil {
			return nil, err
		}
		cr = &ClaimResult{LeaseID: rr.LeaseID, LeaseEpoch: rr.LeaseEpoch, ExpiresAt: rr.ExpiresAt,
			AttemptID: rr.AttemptID, AttemptIndex: rr.AttemptIndex, AttemptType: "resumed"}
	}
	out := &backend.ClaimResult{ExecutionID: id, Fence: fenceOut(cr), ExpiresAt: cr.ExpiresAt,
		AttemptType: cr.AttemptType, LaneID: lane}
	if err := d.readJob(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// readJob fills in the kind, namespace, flow and payload of a claim that
// did not return them.
func (d *Driver) readJob(ctx context.Context, r *backend.ClaimResult) error {
	raw := d.c.Raw()
	k := model.KeysFor(r.ExecutionID)
	res := raw.DoMulti(ctx,
		raw.B().Hmget().Key(k.Core()).Field("execution_kind", "namespace", "flow_id").Build(),
		raw.B().Get().Key(k.Payload()).Build())
	vals, err := res[0].ToArray()
	if err != nil {
		return fmt.Errorf("read %s: %w", r.ExecutionID, err)
	}
	f := make([]string, 3)
	for i := range f {
		if i < len(vals) {
			f[i], _ = vals[i].ToString()
		}
	}
	r.Kind, r.Namespace, r.FlowID = f[0], f[1], f[2]
	b, err := res[1].AsBytes()
	if err != nil && !vk.IsValkeyNil(err) {
		return fmt.Errorf("read %s: %w", r.ExecutionID, err)
	}
	r.Payload = b
	return nil
}

func fenceOut(r *ClaimResult) backend.Fence { return r.Fence() }

// RenewLease implements backend.Driver (ff_renew_lease, lease_current
// kept 5 s past the expiry as workers do).
func (d *Driver) RenewLease(ctx context.Context, p *backend.RenewLeaseParams) (int64, error) {
	exp, err := d.c.RenewLease(ctx, &RenewLeaseParams{ExecutionID: p.ExecutionID, AttemptIndex: p.Fence.AttemptIndex,
		AttemptID: p.Fence.AttemptID, LeaseID: p.Fence.LeaseID, LeaseEpoch: p.Fence.LeaseEpoch,
		LeaseTTLMs: p.LeaseTTLMs, HistoryGraceMs: 5000})
	return exp, mapErr(err, true)
}

// CompleteExecution implements backend.Driver (ff_complete_execution,
// its KEYS from the Holder when complete, else pre-read).
func (d *Driver) CompleteExecution(ctx context.Context, p *backend.CompleteExecutionParams) error {
	cp := &CompleteExecutionParams{ExecutionID: p.ExecutionID, Fence: p.Fence, Result: string(p.Result)}
	if p.Holder.LaneID == "" || p.Holder.WorkerInstanceID == "" {
		return mapErr(d.c.CompleteExecution(ctx, cp), true)
	}
	call := cp.CallFor(p.Holder.LaneID, p.Fence.AttemptIndex, p.Holder.WorkerInstanceID)
	if _, err := d.c.FCall(ctx, call.Function, call.Keys, call.Args); err != nil {
		return mapErr(fmt.Errorf("complete execution %s: %w", p.ExecutionID, err), true)
	}
	return nil
}

// FailExecution implements backend.Driver (ff_fail_execution; the
// retry policy read from the stored policy unless given).
func (d *Driver) FailExecution(ctx context.Context, p *backend.FailExecutionParams) (*backend.FailResult, error) {
	r, err := d.c.FailExecution(ctx, &FailExecutionParams{ExecutionID: p.ExecutionID, Fence: p.Fence,
		FailureReason: p.FailureReason, FailureCategory: p.FailureCategory, RetryPolicyJSON: p.RetryPolicyJSON})
	if err != nil {
		return nil, mapErr(err, true)
	}
	return r, nil
}

// DelayExecution implements backend.Driver (ff_delay_execution).
func (d *Driver) DelayExecution(ctx context.Context, p *backend.DelayExecutionParams) error {
	return mapErr(d.c.DelayExecution(ctx, &DelayExecutionParams{ExecutionID: p.ExecutionID, Fence: p.Fence,
		DelayUntil: p.DelayUntil}), true)
}

// CancelExecution implements backend.Driver (ff_cancel_execution, source
// operator_override).
func (d *Driver) CancelExecution(ctx context.Context, p *backend.CancelExecutionParams) error {
	_, err := d.c.CancelExecution(ctx, &CancelExecutionParams{ExecutionID: p.ExecutionID, Reason: p.Reason,
		Source: SourceOperatorOverride})
	return mapErr(err, false)
}

// ExecutionState implements backend.Driver (HGETALL exec_core).
func (d *Driver) ExecutionState(ctx context.Context, id model.ExecutionID) (*backend.ExecutionState, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, fmt.Errorf("%w: %v", backend.ErrInvalidInput, err)
	}
	m, err := d.c.ExecutionCore(ctx, id)
	if err != nil {
		return nil, mapErr(err, false)
	}
	return backend.StateFromFields(id, m), nil
}

// ExecutionResult implements backend.Driver: the result key, with
// exec_core's existence read in the same round trip.
func (d *Driver) ExecutionResult(ctx context.Context, id model.ExecutionID) ([]byte, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, fmt.Errorf("%w: %v", backend.ErrInvalidInput, err)
	}
	raw := d.c.Raw()
	k := model.KeysFor(id)
	res := raw.DoMulti(ctx, raw.B().Exists().Key(k.Core()).Build(), raw.B().Get().Key(k.Result()).Build())
	n, err := res[0].AsInt64()
	if err != nil {
		return nil, fmt.Errorf("read result of %s: %w", id, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("read result of %s: %w", id, backend.ErrNotFound)
	}
	b, err := res[1].AsBytes()
	if vk.IsValkeyNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read result of %s: %w", id, err)
	}
	return b, nil
}

// SubscribeCompletions implements backend.Driver: a dedicated connection
// SUBSCRIBEd to ff:dag:completions, which FlowFabric's library publishes
// flow members' terminal outcomes on. Pub/Sub does not replay: a lost
// connection stops the subscription (Err says why) and the caller
// subscribes again; what was published in between is the dependency
// reconciler's to repair.
func (d *Driver) SubscribeCompletions(ctx context.Context, p *backend.SubscribeCompletionsParams) (backend.CompletionSubscription, error) {
	buf := p.Buffer
	if buf <= 0 {
		buf = 1024
	}
	dc, release := d.c.Raw().Dedicate()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &vkCompletions{out: make(chan backend.Completion, buf), cancel: cancel, done: make(chan struct{})}
	confirmed := make(chan struct{})
	var once sync.Once
	broken := dc.SetPubSubHooks(vk.PubSubHooks{
		OnMessage: func(m vk.PubSubMessage) {
			c, ok := parseCompletion(m)
			if !ok {
				return
			}
			select { // a full channel blocks this connection: backpressure
			case s.out <- c:
			case <-sctx.Done():
			}
		},
		OnSubscription: func(sub vk.PubSubSubscription) {
			if sub.Kind == "subscribe" && sub.Channel == model.ChannelDAGCompletions {
				once.Do(func() { close(confirmed) })
			}
		},
	})
	fail := func(err error) (backend.CompletionSubscription, error) {
		cancel()
		dc.Close()
		release()
		return nil, fmt.Errorf("subscribe completions: %w", err)
	}
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(model.ChannelDAGCompletions).Build()).Error(); err != nil {
		return fail(err)
	}
	select {
	case <-confirmed:
	case err := <-broken:
		return fail(cmp.Or(err, errors.New("connection closed")))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	go func() {
		defer close(s.done)
		defer release()
		select {
		case err := <-broken:
			s.mu.Lock()
			s.err = cmp.Or(err, errors.New("subscription ended"))
			s.mu.Unlock()
		case <-sctx.Done():
			dc.Close()
		}
		for range broken { // closed once the hooks are no longer called: no send on out after it
		}
		cancel()
		close(s.out)
	}()
	return s, nil
}

// parseCompletion decodes one ff:dag:completions message; a malformed
// one is dropped.
func parseCompletion(m vk.PubSubMessage) (backend.Completion, bool) {
	var msg struct {
		ExecutionID string `json:"execution_id"`
		FlowID      string `json:"flow_id"`
		Outcome     string `json:"outcome"`
	}
	if m.Channel != model.ChannelDAGCompletions || json.Unmarshal([]byte(m.Message), &msg) != nil {
		return backend.Completion{}, false
	}
	id, err := model.ParseExecutionID(msg.ExecutionID)
	if err != nil {
		return backend.Completion{}, false
	}
	flow, err := model.ParseUUID(msg.FlowID)
	if err != nil {
		return backend.Completion{}, false
	}
	return backend.Completion{ExecutionID: id, FlowID: flow, Outcome: msg.Outcome}, true
}

// vkCompletions is the backend.CompletionSubscription of SubscribeCompletions.
type vkCompletions struct {
	out    chan backend.Completion
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// C implements backend.CompletionSubscription.
func (s *vkCompletions) C() <-chan backend.Completion { return s.out }

// Close implements backend.CompletionSubscription.
func (s *vkCompletions) Close() {
	s.cancel()
	<-s.done
	s.mu.Lock()
	s.err = nil
	s.mu.Unlock()
}

// Err implements backend.CompletionSubscription.
func (s *vkCompletions) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// CreateExecutionTx implements backend.Driver: Valkey has no transaction
// a create can join (a MULTI cannot hold the caller's other writes, which
// live elsewhere), so it is ErrUnsupported. Create after the caller's
// commit instead, with an idempotency key derived from the caller's own
// record, so that a retry after a crash between the two creates nothing
// twice.
func (d *Driver) CreateExecutionTx(context.Context, any, *backend.CreateExecutionParams) (*backend.CreateExecutionResult, error) {
	return nil, fmt.Errorf("%w: Valkey has no transaction to create in; create after your commit with an idempotency key", backend.ErrUnsupported)
}
