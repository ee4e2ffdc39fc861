package valkey

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Claimer tuning.
const (
	// scanChunk is how many flow partitions one Claim round reads.
	scanChunk = 32
	// defaultGrantTTLMs is the claim-grant lifetime a claimer asks for
	// when ClaimerConfig.GrantTTLMs is 0.
	defaultGrantTTLMs = 5000
	// stickyRounds bounds how many consecutive rounds Claim re-reads a
	// window that produced work before moving on (fairness across
	// partitions).
	stickyRounds = 16
	// candidateMaxAge bounds how long eligible heads found by one scan
	// round are kept for the next claims before a fresh scan: older heads
	// have likely been taken by other workers.
	candidateMaxAge = 250 * time.Millisecond
	// reclaimReadEvery is how often Claim runs a reclaim pass (see
	// reclaimDue): the lease-expiry scanner marks expired leases, and
	// workers of the lane take them over; the pass stays off the hot
	// path but runs whether or not the worker is busy.
	reclaimReadEvery = time.Second
	// notifiedWindowEvery is how often Claim reads a window of partitions
	// while eligible-work notifications are up and the last window read
	// found nothing: notifications point at new work, the windows only
	// catch what they missed.
	notifiedWindowEvery = 100 * time.Millisecond
)

// Claimer is the Valkey claim session of one worker (backend.Claimer),
// FlowFabric's worker claim engine: fabric_claim_next on the lanes' solo
// partitions (the server picks the heads), buffered eligible heads read
// by pipelined ZRANGEBYSCOREs over windows of flow partitions and
// claimed with fabric_claim_execution, a reclaim pass over lease_expiry,
// delayed promotion (PromoteDelayed), round-robin windows over spreading
// lanes' partitions, and ZADD keyevents that point the claims at the
// partitions that just got work and wake an idle worker. Create it with
// Driver.NewClaimer.
type Claimer struct {
	vc      *Client
	cfg     backend.ClaimerConfig
	parts   model.PartitionConfig
	log     *slog.Logger
	caps    []string
	capsCSV string
	capSet  map[string]bool

	cursor atomic.Uint64
	sticky atomic.Int32
	laneRR atomic.Uint64

	// scanMu guards the candidate buffer and the reclaim-read times.
	scanMu        sync.Mutex
	buffered      []candidate // eligible heads left by the last scan round
	bufferedAt    time.Time
	lostRaces     int            // buffered heads lost in a row
	reclaimAt     time.Time      // last reclaim pass
	reclaimCursor atomic.Uint64  // next window of the reclaim pass
	wake          *eligibleWatch // nil without notifications
	lastWindow    time.Time      // last window read
	windowFound   bool           // the last window read found work

	// soloParts are the solo partitions of the worker's lanes
	// (model.PartitionConfig.SoloPartition): every execution outside a
	// flow lives in its lane's one partition, so Claim reads them before
	// any window. soloLanes are the lanes whose solo partition each one
	// is: the only lanes a solo scan reads there.
	soloParts []model.Partition
	soloLanes map[model.Partition][]string
	// spread is the round-robin read of the lanes that spread over many
	// partitions (claimer_spread.go).
	spread spreadLanes

	stop      chan struct{} // closed by Close
	watchDone chan struct{} // closed when the keyevent watch ended; nil without one
	closeOnce sync.Once
}

var _ backend.Claimer = (*Claimer)(nil)

// NewClaimer implements backend.ClaimerDriver. It reads the lanes'
// solo-partitioner choices (one round trip) and, with cfg.Notifications,
// joins the client's ZADD keyevent subscription (shared by every claimer
// of the client). The claimer routes with the driver's partition config.
func (d *Driver) NewClaimer(ctx context.Context, cfg *backend.ClaimerConfig) (backend.Claimer, error) {
	if cfg == nil || cfg.WorkerID == "" || cfg.WorkerInstanceID == "" || len(cfg.Lanes) == 0 || cfg.LeaseTTLMs <= 0 {
		return nil, fmt.Errorf("%w: new claimer: a worker id, an instance id, lanes and lease_ttl_ms > 0 are required", backend.ErrInvalidInput)
	}
	c := &Claimer{vc: d.c, cfg: *cfg, parts: d.parts, log: cmp.Or(cfg.Logger, slog.Default()),
		caps: slices.Clone(cfg.Capabilities), capsCSV: CapabilityCSV(cfg.Capabilities), capSet: map[string]bool{},
		stop: make(chan struct{})}
	c.cfg.Lanes = slices.Clone(cfg.Lanes)
	c.cfg.GrantTTLMs = cmp.Or(c.cfg.GrantTTLMs, defaultGrantTTLMs)
	c.cfg.Concurrency = max(c.cfg.Concurrency, 1)
	if c.cfg.Clock == nil {
		c.cfg.Clock = time.Now
	}
	for _, x := range cfg.Capabilities {
		c.capSet[x] = true
	}
	c.cursor.Store(model.FNV1a64(cfg.WorkerInstanceID) % uint64(c.parts.Flow))
	c.reclaimCursor.Store(c.cursor.Load())
	c.soloLanes = map[model.Partition][]string{}
	for _, l := range c.cfg.Lanes {
		p := c.parts.SoloPartition(l)
		if !slices.Contains(c.soloParts, p) {
			c.soloParts = append(c.soloParts, p)
		}
		c.soloLanes[p] = append(c.soloLanes[p], l)
	}
	if err := c.initSpread(ctx); err != nil {
		return nil, err
	}
	if cfg.Notifications {
		c.wake = newEligibleWatch(c.cfg.Lanes, c.parts.Flow)
		c.watchDone = make(chan struct{})
		go c.watchEligible()
	}
	return c, nil
}

// Close implements backend.Claimer: it leaves the keyevent subscription
// (the client's last claimer to leave ends it) and waits for that.
func (cl *Claimer) Close() {
	cl.closeOnce.Do(func() { close(cl.stop) })
	if cl.watchDone != nil {
		<-cl.watchDone
	}
}

// Claim implements backend.Claimer. It first tries the eligible heads
// the previous scan round left over (for up to candidateMaxAge), picked
// at random so that workers of one lane reading the same heads spread
// their claims; a lost race moves on to another head rather than reading
// again (until maxLostRaces in a row). Then it claims from the lanes'
// solo partitions with fabric_claim_next (claimSolo: the server picks
// the heads, so workers of one lane do not collide; with PromoteDelayed
// it reads their heads instead, promoting due delayed ones), then reads
// the next window of the spreading lanes' partitions, the notified
// partitions, and the next window of scanChunk flow partitions (one
// pipelined ZRANGEBYSCORE per partition and lane; a window that produced
// work is read again on the next call, up to 16 rounds in a row, because
// work clusters). At most once per reclaimReadEvery, and unless
// DisableReclaim, it first takes over an expired lease (reclaimDue).
func (cl *Claimer) Claim(ctx context.Context, n int) ([]*backend.ClaimResult, error) {
	return cl.claimBatch(ctx, max(n, 1))
}

// CompleteAndClaim implements backend.Claimer: the completion's
// ff_complete_execution (its KEYS built from the fence and p.Holder, no
// pre-read) and, in the same round trip, the claim of the next buffered
// eligible head when there is one (claimBuffered), else of the next
// eligible execution of the lease's lane on its solo partition
// (fabric_claim_next; unless a reclaim pass is due, and none when that
// lane is known to be empty there). Otherwise Claim runs while the
// completion is in flight (the client pipelines the two). Without
// p.Holder's lane and instance id the completion reads them first, as
// Driver.CompleteExecution does.
func (cl *Claimer) CompleteAndClaim(ctx context.Context, p *backend.CompleteExecutionParams, n int) ([]*backend.ClaimResult, error, error) {
	n = max(n, 1)
	cp := &CompleteExecutionParams{ExecutionID: p.ExecutionID, Fence: p.Fence, Result: string(p.Result)}
	if p.Holder.LaneID == "" || p.Holder.WorkerInstanceID == "" {
		// The KEYS cannot be built without them: the completion reads
		// them first, then the claim.
		first := mapErr(cl.vc.CompleteExecution(ctx, cp), true)
		next, cerr := cl.claimBatch(ctx, n)
		return next, first, cerr
	}
	call := cp.CallFor(p.Holder.LaneID, p.Fence.AttemptIndex, p.Holder.WorkerInstanceID)
	completeErr := func(err error) error {
		if err == nil {
			return nil
		}
		return mapErr(fmt.Errorf("%s %s: %w", call.Function, p.ExecutionID, err), true)
	}
	var next []*backend.ClaimResult
	var first, cerr error
	lane := p.Holder.LaneID
	if cl.bufferedLen() > 0 {
		var pre []Result
		next, pre, cerr = cl.claimBuffered(ctx, n, []Call{call})
		first = completeErr(pre[0].Err)
	} else if sp, slane, ok := cl.soloClaimFor(lane); ok && !cl.reclaimPending() {
		if cl.soloKnownEmpty(sp, slane) {
			// Nothing to claim with it: the completion alone, and the
			// worker claims when its slot frees.
			_, err := cl.vc.FCall(ctx, call.Function, call.Keys, call.Args)
			first = completeErr(err)
		} else {
			// The completion and a fabric_claim_next on the lane's solo
			// partition in one round trip.
			mark := cl.soloMark(sp)
			res := cl.vc.FCallBatch(ctx, []Call{call, cl.claimNextCall(sp, slane, n)})
			first = completeErr(res[0].Err)
			next, cerr = cl.claimNextLeases(ctx, sp, slane, n, mark, res[1])
		}
	} else {
		// No head left: the claim reads heads while the completion is in
		// flight; the client pipelines the two.
		done := make(chan struct{})
		go func() {
			defer close(done)
			next, cerr = cl.claimBatch(ctx, n)
		}()
		_, err := cl.vc.FCall(ctx, call.Function, call.Keys, call.Args)
		first = completeErr(err)
		<-done
	}
	return next, first, cerr
}

// ClaimExecution implements backend.Claimer: one fabric_claim_execution
// (grant and claim), then, as the claim's reply says, the claim with a
// grant already there (this worker id's), ff_claim_resumed_execution for
// an interrupted attempt, or, for missing capabilities,
// ff_block_execution_for_admission (the execution waits in
// blocked:route for a capable worker) and (nil, nil). An execution that
// another worker got or that moved on is (nil, nil).
func (cl *Claimer) ClaimExecution(ctx context.Context, id model.ExecutionID, lane string) (*backend.ClaimResult, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil || lane == "" {
		return nil, fmt.Errorf("%w: claim execution %q: a valid id and its lane are required", backend.ErrInvalidInput, id)
	}
	return cl.tryClaim(ctx, candidate{id: id, lane: lane})
}

// ResolveDependencies implements backend.Claimer: with
// ClaimerConfig.ResolveDependencies, the flow member's outgoing edges are
// resolved (CascadeCompletion, what the engine's completion listener
// does on ff:dag:completions). The flow is read again when flowID is ""
// (a member is claimable between its creation and its addition to the
// flow; FlowFabric's completion reads flow_id when it completes, too).
func (cl *Claimer) ResolveDependencies(ctx context.Context, id model.ExecutionID, flowID string) error {
	if !cl.cfg.ResolveDependencies {
		return nil
	}
	if flowID == "" {
		raw := cl.vc.Raw()
		f, err := raw.Do(ctx, raw.B().Hget().Key(model.KeysFor(id).Core()).Field("flow_id").Build()).ToString()
		if err != nil && !vk.IsValkeyNil(err) {
			return fmt.Errorf("resolve dependencies of %s: read flow_id: %w", id, err)
		}
		if flowID = f; flowID == "" {
			return nil
		}
	}
	flow, err := model.ParseUUID(flowID)
	if err != nil {
		return nil
	}
	if _, err := cl.vc.CascadeCompletion(ctx, flow, id, cl.cfg.Clock().UnixMilli()); err != nil {
		return fmt.Errorf("resolve dependencies of %s (flow %s): %w", id, flowID, err)
	}
	return nil
}

// Wake implements backend.Claimer: nudged by ZADD keyevents on the
// lanes' eligible indexes; nil without notifications.
func (cl *Claimer) Wake() <-chan struct{} {
	if cl.wake == nil {
		return nil
	}
	return cl.wake.ch
}

// NotificationsUp implements backend.Claimer. The claimers of one
// *Client share one subscription.
func (cl *Claimer) NotificationsUp() bool {
	return cl.wake != nil && cl.wake.up.Load()
}

// SweepRounds implements backend.Claimer: one round per window of
// scanChunk flow partitions.
func (cl *Claimer) SweepRounds() int {
	return (int(cl.parts.Flow) + scanChunk - 1) / scanChunk
}

// FreesSlotBeforeEnd implements backend.Claimer: false, a completion
// claims its slot's next execution in its own round trip.
func (cl *Claimer) FreesSlotBeforeEnd() bool { return false }

// SpreadPartitions implements backend.Claimer.
func (cl *Claimer) SpreadPartitions() []model.Partition {
	cl.spread.mu.Lock()
	defer cl.spread.mu.Unlock()
	return slices.Clone(cl.spread.parts)
}

// result is the backend.ClaimResult of a claim of id on lane.
func (cl *Claimer) result(id model.ExecutionID, lane string, ji *jobInfo, cr *ClaimResult) *backend.ClaimResult {
	return &backend.ClaimResult{ExecutionID: id, Fence: cr.Fence(), ExpiresAt: cr.ExpiresAt, AttemptType: cr.AttemptType,
		LaneID: lane, Kind: ji.kind, Namespace: ji.namespace, Payload: []byte(ji.payload), FlowID: ji.flow}
}

// attemptTimeoutMs extracts timeout_policy.attempt_timeout_ms from a
// stored policy document (0: none).
func attemptTimeoutMs(doc string) int64 {
	if doc == "" {
		return 0
	}
	var sp struct {
		TimeoutPolicy *struct {
			AttemptTimeoutMs *int64 `json:"attempt_timeout_ms"`
		} `json:"timeout_policy"`
	}
	if json.Unmarshal([]byte(doc), &sp) != nil || sp.TimeoutPolicy == nil || sp.TimeoutPolicy.AttemptTimeoutMs == nil {
		return 0
	}
	return *sp.TimeoutPolicy.AttemptTimeoutMs
}

// LaneSpread implements backend.LaneSpreadDriver: the lane's
// configuration hash (model.LaneConfigKey), read as FlowFabric's default
// when absent.
func (d *Driver) LaneSpread(ctx context.Context, lane string) (model.LaneSpread, error) {
	raw := d.c.Raw()
	m, err := raw.Do(ctx, raw.B().Hgetall().Key(model.LaneConfigKey(lane)).Build()).AsStrMap()
	if err != nil {
		return model.LaneSpread{}, fmt.Errorf("read lane %q config: %w", lane, err)
	}
	s, err := model.ParseLaneSpread(m)
	if err != nil {
		return model.LaneSpread{}, fmt.Errorf("lane %q: %w", lane, err)
	}
	return s, nil
}

// SetLaneSpread implements backend.LaneSpreadDriver: the choice's fields
// in the lane's configuration hash.
func (d *Driver) SetLaneSpread(ctx context.Context, lane string, s model.LaneSpread) error {
	raw := d.c.Raw()
	f := s.Fields()
	cmd := raw.B().Hset().Key(model.LaneConfigKey(lane)).FieldValue().
		FieldValue(model.LaneFieldSoloPartitioner, f[model.LaneFieldSoloPartitioner]).
		FieldValue(model.LaneFieldSpreadPartitions, f[model.LaneFieldSpreadPartitions])
	if err := raw.Do(ctx, cmd.Build()).Error(); err != nil {
		return fmt.Errorf("set lane %q spread: %w", lane, err)
	}
	return nil
}
