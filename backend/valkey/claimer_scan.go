package valkey

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// candidate is one execution a scan round found.
type candidate struct {
	id      model.ExecutionID
	lane    string
	promote *model.Partition // due delayed member of this partition
}

// claimBatch is Claim.
func (cl *Claimer) claimBatch(ctx context.Context, n int) ([]*backend.ClaimResult, error) {
	n = max(n, 1)
	var out []*backend.ClaimResult
	l, err := cl.reclaimDue(ctx)
	if err != nil {
		return nil, err
	}
	if l != nil {
		out = append(out, l)
	}
	claim := func() error {
		if len(out) >= n {
			return nil
		}
		ls, _, err := cl.claimBuffered(ctx, n-len(out), nil)
		out = append(out, ls...)
		return err
	}
	if err := claim(); err != nil || len(out) >= n {
		return out, err
	}
	if cl.cfg.PromoteDelayed {
		// The solo scan also promotes due delayed heads.
		if err := cl.scanSolo(ctx); err != nil {
			return out, err
		}
		if err := claim(); err != nil || len(out) > 0 {
			return out, err
		}
	} else {
		ls, err := cl.claimSolo(ctx, n-len(out))
		out = append(out, ls...)
		if err != nil || len(out) > 0 {
			return out, err
		}
	}
	if err := cl.scanSpread(ctx); err != nil {
		return out, err
	}
	if err := claim(); err != nil || len(out) > 0 {
		return out, err
	}
	if cl.wake != nil {
		if hot := cl.notifiedFlowParts(); len(hot) > 0 {
			cands, err := cl.scan(ctx, hot, cl.headsPerKey(), nil)
			if err != nil {
				return out, err
			}
			cl.keepBuffered(cands)
			err = claim()
			return out, err
		}
	}
	if !cl.windowDue() {
		return out, nil
	}
	np := uint64(cl.parts.Flow)
	chunk := min(uint64(scanChunk), np)
	cur := cl.cursor.Load()
	start := cur % np
	window := make([]model.Partition, chunk)
	for s := range window {
		window[s] = model.Partition{Family: model.FamilyFlow, Index: uint16((start + uint64(s)) % np)}
	}
	cands, err := cl.scan(ctx, window, cl.headsPerKey(), nil)
	if err != nil {
		return out, err
	}
	cl.scanMu.Lock()
	cl.windowFound = len(cands) > 0
	cl.scanMu.Unlock()
	promoted := false
	var eligible []candidate
	for _, c := range cands {
		if c.promote != nil {
			promoted = cl.promoteDue(ctx, c, *c.promote) || promoted
			continue
		}
		eligible = append(eligible, c)
	}
	cl.keepBuffered(eligible)
	if err := claim(); err != nil || len(out) > 0 {
		if cl.sticky.Add(1) >= stickyRounds {
			cl.sticky.Store(0)
			cl.cursor.CompareAndSwap(cur, cur+chunk)
		}
		return out, err
	}
	if promoted {
		return out, nil // read this window again: it has work now
	}
	cl.sticky.Store(0)
	cl.cursor.CompareAndSwap(cur, cur+chunk)
	return out, nil
}

// claimSolo claims up to n executions from the lanes' solo partitions,
// where every execution outside a flow is, with one fabric_claim_next per
// partition and lane (claimNextOn) until n are claimed, lanes rotated per
// call. A lane known to be empty there (soloKnownEmpty) is not asked.
func (cl *Claimer) claimSolo(ctx context.Context, n int) ([]*backend.ClaimResult, error) {
	var out []*backend.ClaimResult
	rot := int(cl.laneRR.Add(1))
	for _, p := range cl.soloParts {
		lanes := cl.soloLanes[p]
		for i := range lanes {
			if len(out) >= n {
				return out, nil
			}
			lane := lanes[(rot+i)%len(lanes)]
			if cl.soloKnownEmpty(p, lane) {
				continue
			}
			ls, err := cl.claimNextOn(ctx, p, lane, n-len(out))
			out = append(out, ls...)
			if err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// notifiedFlowParts takes the notified partitions, leaving out the solo
// partitions that claimSolo claims from (a worker without PromoteDelayed
// has just asked them with fabric_claim_next; reading their heads would
// only make workers of the lane race for them).
func (cl *Claimer) notifiedFlowParts() []model.Partition {
	hot := cl.wake.take()
	if cl.cfg.PromoteDelayed {
		return hot
	}
	out := hot[:0]
	for _, p := range hot {
		if _, solo := cl.soloLanes[p]; !solo {
			out = append(out, p)
		}
	}
	return out
}

// soloClaimFor picks the solo partition and lane a completion's
// pipelined claim asks (CompleteAndClaim): the finished lease's lane when
// it has a solo partition here, else the next lane in rotation. ok is
// false when the worker reads its solo partitions instead (PromoteDelayed)
// or has none.
func (cl *Claimer) soloClaimFor(lane string) (model.Partition, string, bool) {
	if cl.cfg.PromoteDelayed || len(cl.soloParts) == 0 {
		return model.Partition{}, "", false
	}
	if p := cl.parts.SoloPartition(lane); slices.Contains(cl.soloLanes[p], lane) {
		return p, lane, true
	}
	p := cl.soloParts[int(cl.laneRR.Add(1)%uint64(len(cl.soloParts)))]
	return p, cl.soloLanes[p][0], true
}

// claimNextExtraHeads is how many heads beyond the wanted claims one
// fabric_claim_next may try, so that a few heads this worker cannot take
// (another's grant, missing capabilities) do not starve it.
const claimNextExtraHeads = 4

// claimNextOn claims up to n eligible executions of lane on partition p
// with one fabric_claim_next (the server picks the heads, so workers of
// one lane never race for one). Heads it refused are handled as a claim
// by id would be (claimOutcome) while fewer than n were claimed (see
// claimNextLeases).
func (cl *Claimer) claimNextOn(ctx context.Context, p model.Partition, lane string, n int) ([]*backend.ClaimResult, error) {
	mark := cl.soloMark(p)
	return cl.claimNextLeases(ctx, p, lane, n, mark, cl.vc.FCallBatch(ctx, []Call{cl.claimNextCall(p, lane, n)})[0])
}

// soloMark is read before a fabric_claim_next on p is sent: what
// claimNextLeases needs to remember the lane as empty.
func (cl *Claimer) soloMark(p model.Partition) emptyMark {
	if cl.wake == nil {
		return emptyMark{}
	}
	return cl.wake.before(p)
}

// soloKnownEmpty reports whether a fabric_claim_next of lane on p would
// find no head, as far as the eligible-work notifications tell
// (eligibleWatch.knownEmpty): an idle worker otherwise asks again on
// every round of its idle sweep and after every completion.
func (cl *Claimer) soloKnownEmpty(p model.Partition, lane string) bool {
	return cl.wake != nil && cl.wake.knownEmpty(p, lane, cl.cfg.Clock())
}

// claimNextCall is the fabric_claim_next of up to n claims of lane on
// partition p.
func (cl *Claimer) claimNextCall(p model.Partition, lane string, n int) Call {
	params := &FabricClaimNextParams{Partition: p, Lane: lane, WorkerID: cl.cfg.WorkerID,
		WorkerInstanceID: cl.cfg.WorkerInstanceID, LeaseTTLMs: cl.cfg.LeaseTTLMs, GrantTTLMs: cl.cfg.GrantTTLMs,
		WorkerCapabilitiesCSV: cl.capsCSV, Claims: n, Heads: n + claimNextExtraHeads}
	return params.Call()
}

// claimNextLeases turns the result of a fabric_claim_next of up to n on
// lane into leases. The heads it refused are handled as a claim by id
// would be (claimOutcome: a grant already there tried, an interrupted
// attempt resumed, the rest skipped) only while fewer than n leases are
// taken, in head order, so that the call never yields more than n (a
// lease beyond them would have to be handed back, through the delayed
// index). A head refused for missing capabilities is parked in
// blocked:route whatever the count: that takes no lease. A refused head
// left alone stays at the head of the lane and is tried again by the
// next claim that falls short, or claimed normally once its grant
// expires.
//
// A call that found no head at all marks the lane empty on p (mark is
// soloMark(p) read before the call was sent), so that it is not asked
// again until a notification says otherwise.
func (cl *Claimer) claimNextLeases(ctx context.Context, p model.Partition, lane string, n int, mark emptyMark, res Result) ([]*backend.ClaimResult, error) {
	if res.Err != nil {
		return nil, res.Err
	}
	items, err := ParseFabricClaimNext(res.Reply)
	if err != nil {
		return nil, err
	}
	if cl.wake != nil {
		cl.wake.markEmpty(p, lane, mark, len(items) == 0, cl.cfg.Clock())
	}
	var out []*backend.ClaimResult
	var refused []ClaimNextItem
	for _, it := range items {
		if it.Result != nil {
			out = append(out, cl.leaseFromClaim(candidate{id: it.ExecutionID, lane: lane}, it.Result))
		} else {
			refused = append(refused, it)
		}
	}
	var errs []error
	for _, it := range refused {
		if len(out) >= n && !errors.Is(it.Err, CodeCapabilityMismatch) {
			continue
		}
		l, err := cl.claimOutcome(ctx, candidate{id: it.ExecutionID, lane: lane}, Result{Err: it.Err})
		if err != nil {
			errs = append(errs, err)
		} else if l != nil {
			out = append(out, l)
		}
	}
	return out, errors.Join(errs...)
}

// soloHeads is how many heads a solo scan reads per solo partition and
// lane: every worker of a lane reads the same partition, and picking at
// random among 64 heads keeps them from racing for the same few.
const soloHeads = 64

// scanSolo reads the heads of the lanes' solo partitions, where every
// execution outside a flow is, promotes due delayed heads (with
// PromoteDelayed) and buffers the eligible ones.
func (cl *Claimer) scanSolo(ctx context.Context) error {
	if len(cl.soloParts) == 0 {
		return nil
	}
	cands, err := cl.scan(ctx, cl.soloParts, soloHeads, cl.soloLanes)
	if err != nil {
		return err
	}
	eligible := cands[:0:0]
	for _, c := range cands {
		if c.promote != nil {
			cl.promoteDue(ctx, c, *c.promote)
			continue
		}
		eligible = append(eligible, c)
	}
	cl.keepBuffered(eligible)
	return nil
}

// claimBuffered claims up to n buffered heads, all of a round in one
// pipelined round trip behind the calls of pre (sent in the first round
// even when no head is buffered; their results are returned). A lost race
// is replaced by the next buffered head in the next round, until n leases
// are taken or the buffer is empty.
func (cl *Claimer) claimBuffered(ctx context.Context, n int, pre []Call) ([]*backend.ClaimResult, []Result, error) {
	var leases []*backend.ClaimResult
	var preRes []Result
	for len(leases) < n || pre != nil {
		var batch []candidate
		for len(batch) < n-len(leases) {
			c, ok := cl.nextBuffered()
			if !ok {
				break
			}
			batch = append(batch, c)
		}
		if len(batch) == 0 && pre == nil {
			break
		}
		calls := make([]Call, 0, len(pre)+len(batch))
		calls = append(calls, pre...)
		for _, c := range batch {
			calls = append(calls, cl.claimCall(c))
		}
		res := cl.vc.FCallBatch(ctx, calls)
		if pre != nil {
			preRes, res, pre = res[:len(pre)], res[len(pre):], nil
		}
		var errs []error
		for i, c := range batch {
			l, err := cl.claimOutcome(ctx, c, res[i])
			if err != nil {
				errs = append(errs, err)
			} else if l != nil {
				leases = append(leases, l)
			}
			cl.lostRace(err == nil && l == nil)
		}
		if len(errs) > 0 {
			return leases, preRes, errors.Join(errs...)
		}
		if len(batch) == 0 {
			break
		}
	}
	return leases, preRes, nil
}

// nextBuffered pops a random buffered eligible head, if the buffer is
// still fresh. Workers of one lane read the same heads: picking at random
// among many keeps them from racing for the same few.
func (cl *Claimer) nextBuffered() (candidate, bool) {
	cl.scanMu.Lock()
	defer cl.scanMu.Unlock()
	if len(cl.buffered) == 0 {
		return candidate{}, false
	}
	if cl.cfg.Clock().Sub(cl.bufferedAt) > candidateMaxAge {
		cl.buffered = nil
		return candidate{}, false
	}
	i := rand.IntN(len(cl.buffered))
	c := cl.buffered[i]
	cl.buffered[i] = cl.buffered[len(cl.buffered)-1]
	cl.buffered = cl.buffered[:len(cl.buffered)-1]
	return c, true
}

// bufferedLen is how many fresh heads are buffered.
func (cl *Claimer) bufferedLen() int {
	cl.scanMu.Lock()
	defer cl.scanMu.Unlock()
	if cl.cfg.Clock().Sub(cl.bufferedAt) > candidateMaxAge {
		return 0
	}
	return len(cl.buffered)
}

// lostRace notes a buffered head another worker took first; after
// maxLostRaces in a row the buffer is stale and dropped, so that the next
// claim reads fresh heads. won resets the count.
func (cl *Claimer) lostRace(lost bool) {
	cl.scanMu.Lock()
	defer cl.scanMu.Unlock()
	if !lost {
		cl.lostRaces = 0
		return
	}
	if cl.lostRaces++; cl.lostRaces >= maxLostRaces {
		cl.buffered, cl.lostRaces = nil, 0
	}
}

// maxLostRaces is how many lost races in a row make the buffered heads
// stale.
const maxLostRaces = 2

// keepBuffered replaces the buffer with the eligible heads of a scan.
func (cl *Claimer) keepBuffered(cands []candidate) {
	var keep []candidate
	for _, c := range cands {
		if c.promote == nil {
			keep = append(keep, c)
		}
	}
	cl.scanMu.Lock()
	cl.buffered, cl.bufferedAt, cl.lostRaces = keep, cl.cfg.Clock(), 0
	cl.scanMu.Unlock()
}

// headsPerKey is how many eligible heads a scan reads per partition and
// lane: enough to feed this worker's concurrency for a few claims from
// one round trip.
func (cl *Claimer) headsPerKey() int64 {
	return int64(min(max(2*cl.cfg.Concurrency, 4), 32))
}

// windowDue reports whether Claim reads a window now: always without
// notifications or after a window that found work (a backlog), else at
// most every notifiedWindowEvery.
func (cl *Claimer) windowDue() bool {
	cl.scanMu.Lock()
	defer cl.scanMu.Unlock()
	now := cl.cfg.Clock()
	if cl.wake != nil && cl.wake.up.Load() && !cl.windowFound &&
		now.Sub(cl.lastWindow) < notifiedWindowEvery && !now.Before(cl.lastWindow) {
		return false
	}
	cl.lastWindow = now
	return true
}

// scan reads up to heads eligible heads per partition of parts and lane
// in one DoMulti and returns candidates: due delayed heads to promote
// first (with PromoteDelayed), then eligible heads, lanes rotated per
// call. The lanes read on a partition are all the worker's, or only[p]
// when only is set.
func (cl *Claimer) scan(ctx context.Context, parts []model.Partition, heads int64, only map[model.Partition][]string) ([]candidate, error) {
	raw := cl.vc.Raw()
	lanes := cl.cfg.Lanes
	rot := int(cl.laneRR.Add(1) % uint64(len(lanes)))
	now := strconv.FormatInt(cl.cfg.Clock().UnixMilli(), 10)
	per := len(lanes)
	if cl.cfg.PromoteDelayed {
		per += len(lanes)
	}
	cmds := make(vk.Commands, 0, len(parts)*per)
	type slot struct {
		part    model.Partition
		lane    string
		delayed bool
	}
	slots := make([]slot, 0, cap(cmds))
	for _, p := range parts {
		pk := model.KeysOn(p)
		ls := lanes
		if only != nil {
			ls = only[p]
		}
		for i := range ls {
			lane := ls[(rot+i)%len(ls)]
			cmds = append(cmds, raw.B().Zrangebyscore().Key(pk.LaneEligible(lane)).Min("-inf").Max("+inf").Limit(0, heads).Build())
			slots = append(slots, slot{part: p, lane: lane})
			if cl.cfg.PromoteDelayed {
				cmds = append(cmds, raw.B().Zrangebyscore().Key(pk.LaneDelayed(lane)).Min("-inf").Max(now).Limit(0, 1).Build())
				slots = append(slots, slot{part: p, lane: lane, delayed: true})
			}
		}
	}
	var promotes, eligible []candidate
	for i, r := range raw.DoMulti(ctx, cmds...) {
		ids, err := r.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("scan partitions: %w", err)
		}
		for _, s := range ids {
			id, err := model.ParseExecutionID(s)
			if slots[i].delayed {
				// The promoter cleans up members that do not parse.
				promotes = append(promotes, candidate{id: model.ExecutionID(s), lane: slots[i].lane, promote: &slots[i].part})
				continue
			}
			if err != nil || id.Partition() != slots[i].part {
				cl.log.Warn("skipping malformed index member", "member", s, "partition", slots[i].part.Tag())
				continue
			}
			eligible = append(eligible, candidate{id: id, lane: slots[i].lane})
		}
	}
	return append(promotes, eligible...), nil
}

// jobInfo is what a claim pre-reads about a candidate in one round trip.
type jobInfo struct {
	required, kind, namespace, lane, ownership, phase, flow string
	payload, policy                                         string
}

func (cl *Claimer) readJob(ctx context.Context, id model.ExecutionID) (*jobInfo, error) {
	raw := cl.vc.Raw()
	k := model.KeysFor(id)
	res := raw.DoMulti(ctx,
		raw.B().Hmget().Key(k.Core()).Field("required_capabilities", "execution_kind", "namespace", "lane_id",
			"ownership_state", "lifecycle_phase", "flow_id").Build(),
		raw.B().Get().Key(k.Payload()).Build(),
		raw.B().Get().Key(k.Policy()).Build())
	vals, err := res[0].ToArray()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", id, err)
	}
	f := make([]string, 7)
	for i := range f {
		if i < len(vals) {
			f[i], _ = vals[i].ToString()
		}
	}
	ji := &jobInfo{required: f[0], kind: f[1], namespace: f[2], lane: f[3], ownership: f[4], phase: f[5], flow: f[6]}
	for i, dst := range []*string{&ji.payload, &ji.policy} {
		s, err := res[1+i].ToString()
		if err != nil && !vk.IsValkeyNil(err) {
			return nil, fmt.Errorf("read %s: %w", id, err)
		}
		*dst = s
	}
	return ji, nil
}

// missingCaps returns the required capabilities this worker lacks.
func (cl *Claimer) missingCaps(csv string) []string {
	var miss []string
	for _, c := range splitCSV(csv) {
		if !cl.capSet[c] {
			miss = append(miss, c)
		}
	}
	return miss
}

func splitCSV(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ',' {
			i++
		}
		if i > 0 {
			out = append(out, s[:i])
		}
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}

// claimCall is the fabric_claim_execution of a candidate: a grant of
// ClaimerConfig.GrantTTLMs and the claim in one call, the attempt timeout taken from the
// stored policy on the server.
func (cl *Claimer) claimCall(c candidate) Call {
	p := &FabricClaimParams{Claim: ClaimExecutionParams{ExecutionID: c.id, WorkerID: cl.cfg.WorkerID,
		WorkerInstanceID: cl.cfg.WorkerInstanceID, LaneID: c.lane, LeaseTTLMs: cl.cfg.LeaseTTLMs},
		GrantTTLMs: cl.cfg.GrantTTLMs, WorkerCapabilitiesCSV: cl.capsCSV, AttemptTimeoutFromPolicy: true}
	return p.Call()
}

// tryClaim claims one candidate with one fabric_claim_execution.
func (cl *Claimer) tryClaim(ctx context.Context, c candidate) (*backend.ClaimResult, error) {
	return cl.claimOutcome(ctx, c, cl.vc.FCallBatch(ctx, []Call{cl.claimCall(c)})[0])
}

// claimOutcome turns the result of a candidate's fabric_claim_execution
// into a lease, or nil when the candidate is not this worker's to run now
// (another worker got it, it moved on, or it needs capabilities this
// worker lacks: then it is parked in blocked:route, as FlowFabric's
// inline claim does). An interrupted attempt continues with
// ff_claim_resumed_execution and the grant the call left; a grant that
// already existed may be this worker id's (a scheduler's, or another
// instance's), so the claim is tried with it.
func (cl *Claimer) claimOutcome(ctx context.Context, c candidate, res Result) (*backend.ClaimResult, error) {
	if res.Err == nil {
		fr, err := ParseFabricClaim(res.Reply)
		if err != nil {
			return nil, err
		}
		return cl.leaseFromClaim(c, fr), nil
	}
	err := res.Err
	var le *LuaError
	switch {
	case errors.Is(err, CodeCapabilityMismatch) && errors.As(err, &le):
		cl.blockRoute(ctx, c.id, splitCSV(le.Detail(0)))
		return nil, nil
	case errors.Is(err, CodeUseClaimResumedExecution):
		ji, err := cl.readJob(ctx, c.id)
		if err != nil {
			return nil, err
		}
		return cl.claimResumed(ctx, c, ji)
	case errors.Is(err, CodeGrantAlreadyExists):
		return cl.claimWithExistingGrant(ctx, c)
	case skippable(err):
		return nil, nil
	}
	return nil, err
}

// leaseFromClaim is the claim result of a successful fabric claim of c
// (the reply carries what the worker needs: no pre-read).
func (cl *Claimer) leaseFromClaim(c candidate, fr *FabricClaimResult) *backend.ClaimResult {
	return &backend.ClaimResult{ExecutionID: c.id, Fence: fr.Fence(), ExpiresAt: fr.ExpiresAt, AttemptType: fr.AttemptType,
		LaneID: cmp.Or(fr.Lane, c.lane), Kind: fr.Kind, Namespace: fr.Namespace, Payload: fr.Payload, FlowID: fr.FlowID}
}

// claimWithExistingGrant claims with a grant that was already there
// (ff_claim_execution checks it is this worker id's).
func (cl *Claimer) claimWithExistingGrant(ctx context.Context, c candidate) (*backend.ClaimResult, error) {
	ji, err := cl.readJob(ctx, c.id)
	if err != nil {
		return nil, err
	}
	if ji.phase != model.PhaseRunnable {
		return nil, nil
	}
	cr, err := cl.vc.ClaimExecution(ctx, &ClaimExecutionParams{ExecutionID: c.id, WorkerID: cl.cfg.WorkerID,
		WorkerInstanceID: cl.cfg.WorkerInstanceID, LaneID: c.lane, LeaseTTLMs: cl.cfg.LeaseTTLMs,
		AttemptTimeoutMs: attemptTimeoutMs(ji.policy)})
	switch {
	case err == nil:
		return cl.result(c.id, c.lane, ji, cr), nil
	case errors.Is(err, CodeUseClaimResumedExecution):
		return cl.claimResumed(ctx, c, ji)
	case skippable(err):
		return nil, nil
	}
	return nil, err
}

// blockRoute parks an execution this worker cannot run in blocked:route
// (ff_block_execution_for_admission, waiting_for_capable_worker) so the
// scan does not keep hitting it; the unblock scanner returns it to
// eligible once a capable worker registers. Best effort.
func (cl *Claimer) blockRoute(ctx context.Context, id model.ExecutionID, missing []string) {
	err := cl.vc.BlockExecutionForAdmission(ctx, id, "waiting_for_capable_worker",
		"no connected worker satisfies required_capabilities", cl.cfg.Clock().UnixMilli())
	if err != nil && !skippable(err) {
		cl.log.Warn("block execution for capable worker failed", "execution_id", id, "error", err)
		return
	}
	cl.log.Info("capability mismatch; execution blocked for a capable worker", "execution_id", id, "missing", missing)
}

// reclaimHeads is how many due lease_expiry members a reclaim pass reads
// per partition: members of other lanes, or leases not yet marked
// expired, must not hide the reclaimable ones behind them.
const reclaimHeads = 16

// reclaimDue is the worker's reclaim pass, at most once per
// reclaimReadEvery whether or not the worker is busy: it reads the due
// heads of lease_expiry on the worker's solo partitions and on the next
// window of scanChunk flow partitions (so every partition is
// read within Flow/scanChunk passes), pre-reads the candidates'
// state in one pipelined round trip, and takes over the first one that is
// marked expired (or revoked) on one of its lanes with capabilities it
// has. A due lease not marked yet is marked first
// (ff_mark_lease_expired_if_due, the lease-expiry scanner's own re-check),
// so that a worker reclaims without a host, as on Postgres. A candidate past its reclaim limit is failed terminally by
// ff_reclaim_execution itself (max_reclaims_exceeded).
// reclaimPending reports whether the next Claim would run a reclaim
// pass (reclaimDue), without starting one.
func (cl *Claimer) reclaimPending() bool {
	if cl.cfg.DisableReclaim {
		return false
	}
	now := cl.cfg.Clock()
	cl.scanMu.Lock()
	defer cl.scanMu.Unlock()
	return cl.reclaimAt.IsZero() || now.Sub(cl.reclaimAt) >= reclaimReadEvery || now.Before(cl.reclaimAt)
}

func (cl *Claimer) reclaimDue(ctx context.Context) (*backend.ClaimResult, error) {
	if cl.cfg.DisableReclaim {
		return nil, nil
	}
	now := cl.cfg.Clock()
	cl.scanMu.Lock()
	if !cl.reclaimAt.IsZero() && now.Sub(cl.reclaimAt) < reclaimReadEvery && !now.Before(cl.reclaimAt) {
		cl.scanMu.Unlock()
		return nil, nil
	}
	cl.reclaimAt = now
	cl.scanMu.Unlock()

	n := uint64(cl.parts.Flow)
	chunk := min(uint64(scanChunk), n)
	start := cl.reclaimCursor.Add(chunk) - chunk
	parts := append([]model.Partition(nil), cl.soloParts...)
	for s := range chunk {
		p := model.Partition{Family: model.FamilyFlow, Index: uint16((start + s) % n)}
		if _, solo := cl.soloLanes[p]; !solo {
			parts = append(parts, p)
		}
	}
	raw := cl.vc.Raw()
	due := fmt.Sprint(now.UnixMilli())
	cmds := make(vk.Commands, len(parts))
	for i, p := range parts {
		cmds[i] = raw.B().Zrangebyscore().Key(model.KeysOn(p).LeaseExpiry()).Min("-inf").Max(due).Limit(0, reclaimHeads).Build()
	}
	var ids []model.ExecutionID
	for i, r := range raw.DoMulti(ctx, cmds...) {
		members, err := r.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("read due leases: %w", err)
		}
		for _, m := range members {
			id, err := model.ParseExecutionID(m)
			if err != nil || id.Partition() != parts[i] {
				cl.log.Warn("skipping malformed index member", "member", m, "partition", parts[i].Tag())
				continue
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// One round trip tells which candidates are this worker's to reclaim.
	reads := make(vk.Commands, len(ids))
	for i, id := range ids {
		reads[i] = raw.B().Hmget().Key(model.KeysFor(id).Core()).Field("lifecycle_phase", "ownership_state", "lane_id").Build()
	}
	for i, r := range raw.DoMulti(ctx, reads...) {
		f, err := r.ToArray()
		if err != nil || len(f) != 3 {
			continue
		}
		phase, _ := f[0].ToString()
		own, _ := f[1].ToString()
		lane, _ := f[2].ToString()
		if phase != model.PhaseActive || !cl.servesLane(lane) {
			continue
		}
		if own == model.OwnershipLeased {
			// Due in lease_expiry and not marked yet (no host runs the
			// lease-expiry scanner, or it has not got there): mark it
			// as the scanner would, so a worker reclaims without a host.
			r, err := cl.vc.MarkLeaseExpiredIfDue(ctx, &MarkLeaseExpiredIfDueParams{ExecutionID: ids[i]})
			if err != nil {
				if skippable(err) {
					continue
				}
				return nil, fmt.Errorf("mark expired lease of %s: %w", ids[i], err)
			}
			if r.Reason != "marked_expired" && r.Reason != "already_expired" {
				continue
			}
			own = model.OwnershipLeaseExpiredReclaimable
		}
		if own != model.OwnershipLeaseExpiredReclaimable && own != model.OwnershipLeaseRevoked {
			continue
		}
		l, err := cl.tryReclaim(ctx, candidate{id: ids[i], lane: lane})
		if err != nil || l != nil {
			return l, err
		}
	}
	return nil, nil
}

// claimResumed claims an execution whose attempt was interrupted
// (resumed from suspension, a worker delay or waiting children) with the
// grant the failed ff_claim_execution left in place
// (ff_claim_resumed_execution): the same attempt continues under a new
// lease.
func (cl *Claimer) claimResumed(ctx context.Context, c candidate, ji *jobInfo) (*backend.ClaimResult, error) {
	r, err := cl.vc.ClaimResumedExecution(ctx, &ClaimResumedParams{ExecutionID: c.id,
		WorkerID: cl.cfg.WorkerID, WorkerInstanceID: cl.cfg.WorkerInstanceID, Lane: c.lane,
		LeaseID: model.NewUUID().String(), LeaseTTLMs: cl.cfg.LeaseTTLMs})
	if err != nil {
		if skippable(err) {
			return nil, nil
		}
		return nil, err
	}
	return cl.result(c.id, c.lane, ji, &ClaimResult{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch,
		ExpiresAt: r.ExpiresAt, AttemptID: r.AttemptID, AttemptIndex: r.AttemptIndex, AttemptType: "resumed"}), nil
}

// tryReclaim takes over an execution whose lease expired or was revoked:
// ff_issue_reclaim_grant then ff_reclaim_execution, a new attempt of type
// "reclaim". Executions whose lease is merely due (not yet marked expired
// by the lease-expiry scanner or reclaimDue) are left alone.
func (cl *Claimer) tryReclaim(ctx context.Context, c candidate) (*backend.ClaimResult, error) {
	ji, err := cl.readJob(ctx, c.id)
	if err != nil {
		return nil, err
	}
	if ji.phase != model.PhaseActive || (ji.ownership != model.OwnershipLeaseExpiredReclaimable &&
		ji.ownership != model.OwnershipLeaseRevoked) || !cl.servesLane(ji.lane) || len(cl.missingCaps(ji.required)) > 0 {
		return nil, nil
	}
	if _, err := cl.vc.IssueReclaimGrant(ctx, &IssueClaimGrantParams{ExecutionID: c.id,
		WorkerID: cl.cfg.WorkerID, WorkerInstanceID: cl.cfg.WorkerInstanceID, Lane: ji.lane,
		GrantTTLMs: cl.cfg.GrantTTLMs, WorkerCapabilities: cl.caps}); err != nil {
		if skippable(err) {
			return nil, nil
		}
		return nil, err
	}
	cr, err := cl.vc.ReclaimExecution(ctx, &ReclaimExecutionParams{ExecutionID: c.id,
		WorkerID: cl.cfg.WorkerID, WorkerInstanceID: cl.cfg.WorkerInstanceID, LaneID: ji.lane,
		LeaseTTLMs: cl.cfg.LeaseTTLMs})
	if err != nil {
		if skippable(err) || errors.Is(err, CodeMaxRetriesExhausted) {
			return nil, nil
		}
		return nil, err
	}
	return cl.result(c.id, ji.lane, ji, cr), nil
}

func (cl *Claimer) servesLane(lane string) bool {
	for _, l := range cl.cfg.Lanes {
		if l == lane {
			return true
		}
	}
	return false
}

// promoteDue promotes a due delayed execution (ff_promote_delayed), for
// workers configured with PromoteDelayed.
func (cl *Claimer) promoteDue(ctx context.Context, c candidate, p model.Partition) bool {
	st, err := cl.vc.PromoteDelayed(ctx, &PromoteDelayedParams{ExecutionID: c.id, Partition: &p,
		Lane: c.lane, NowMs: cl.cfg.Clock().UnixMilli()})
	if err != nil && ctx.Err() == nil {
		cl.log.Warn("promote delayed failed", "execution_id", c.id, "error", err)
	}
	return st == PromotePromoted
}
