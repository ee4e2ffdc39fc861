package sdk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// Worker defaults.
const (
	// DefaultLeaseTTL is the lease lifetime (FlowFabric's worker default).
	DefaultLeaseTTL = 30 * time.Second
	// GrantTTL is the claim-grant lifetime the SDK asks for (5000 ms).
	GrantTTL = 5 * time.Second
	// PartitionScanChunk is how many partitions one ClaimNext round reads.
	PartitionScanChunk = 32
	// DefaultIdlePollMin and DefaultIdlePollMax bound Run's idle backoff.
	DefaultIdlePollMin = 10 * time.Millisecond
	DefaultIdlePollMax = 500 * time.Millisecond
	// DefaultShutdownTimeout is how long Run lets in-flight handlers
	// finish after its context ends.
	DefaultShutdownTimeout = 10 * time.Second
	// stickyRounds bounds how many consecutive rounds ClaimNext re-reads
	// a window that produced work before moving on (fairness across
	// partitions).
	stickyRounds = 16
	// candidateMaxAge bounds how long eligible heads found by one scan
	// round are kept for the next claims before a fresh scan: older heads
	// have likely been taken by other workers.
	candidateMaxAge = 250 * time.Millisecond
	// reclaimReadEvery is how often ClaimNext runs a reclaim pass (see
	// reclaimDue): the lease-expiry scanner marks expired leases, and
	// workers of the lane take them over; the pass stays off the hot
	// path but runs whether or not the worker is busy.
	reclaimReadEvery = time.Second
	// notifiedWindowEvery is how often ClaimNext reads a window of
	// partitions while eligible-work notifications are up and the last
	// window read found nothing: notifications point at new work, the
	// windows only catch what they missed.
	notifiedWindowEvery = 100 * time.Millisecond
)

// WorkerConfig configures a Worker. WorkerID and Lanes are required.
type WorkerConfig struct {
	// WorkerID names the worker (shared by its instances).
	WorkerID string
	// InstanceID identifies this process; empty mints WorkerID-<uuid>.
	// Two live processes must not share one.
	InstanceID string
	// Namespace scopes the worker registry (DefaultNamespace when empty).
	Namespace string
	// Lanes are the lanes the worker claims from.
	Lanes []string
	// Capabilities are advertised and matched against executions'
	// required capabilities.
	Capabilities []string
	// LeaseTTL is the lease lifetime (DefaultLeaseTTL when 0, at least
	// 100ms). Leases renew at 2/3 of it; the registry TTL is twice it.
	LeaseTTL time.Duration
	// Concurrency is how many handlers Run executes at once (1 when 0).
	Concurrency int
	// IdlePollMin and IdlePollMax bound Run's backoff when no work is
	// found (10ms and 500ms when 0); a claim resets it.
	IdlePollMin, IdlePollMax time.Duration
	// ShutdownTimeout is how long Run waits for in-flight handlers after
	// its context ends before handing their leases back
	// (DefaultShutdownTimeout when 0).
	ShutdownTimeout time.Duration
	// DisableReclaim stops ClaimNext from taking over expired or revoked
	// leases (ff_issue_reclaim_grant + ff_reclaim_execution).
	DisableReclaim bool
	// PromoteDelayed makes ClaimNext also promote due delayed executions
	// of its lanes (ff_promote_delayed), for deployments that run
	// without the delayed-promoter scanner. Off by default: the scanner
	// owns this.
	PromoteDelayed bool
	// ResolveDependencies makes the worker resolve a flow member's
	// outgoing edges itself after ending it terminally (what the
	// engine's completion listener does on ff:dag:completions), for
	// deployments without the engine. Resolution is idempotent, so
	// running both is safe.
	ResolveDependencies bool
	// DisableNotifications stops the worker from subscribing to ZADD
	// keyevents (and from turning them on with CONFIG SET), or on
	// Postgres from LISTENing on fabric_eligible. With them, the worker
	// reads the partitions that just got eligible work on its lanes and
	// an idle worker wakes at once; without them it finds work by
	// polling only.
	DisableNotifications bool
	// Clock is the worker's time source (time.Now when nil).
	Clock func() time.Time
	// Logger receives worker logs (slog.Default() when nil).
	Logger *slog.Logger
}

func (c *WorkerConfig) fill() error {
	if c.WorkerID == "" {
		return invalid("WorkerConfig.WorkerID", "is required")
	}
	if len(c.Lanes) == 0 {
		return invalid("WorkerConfig.Lanes", "at least one lane is required")
	}
	for _, l := range c.Lanes {
		if err := ValidateLane(l); err != nil {
			return err
		}
	}
	if err := validateCapabilities("WorkerConfig.Capabilities", c.Capabilities); err != nil {
		return err
	}
	if c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < 100*time.Millisecond) {
		return invalid("WorkerConfig.LeaseTTL", "must be 0 (default) or at least 100ms (got %s)", c.LeaseTTL)
	}
	if c.Concurrency < 0 {
		return invalid("WorkerConfig.Concurrency", "must not be negative (got %d)", c.Concurrency)
	}
	if c.IdlePollMin < 0 || c.IdlePollMax < 0 || c.ShutdownTimeout < 0 {
		return invalid("WorkerConfig", "durations must not be negative")
	}
	c.InstanceID = cmp.Or(c.InstanceID, c.WorkerID+"-"+model.NewUUID().String())
	c.Namespace = cmp.Or(c.Namespace, DefaultNamespace)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.Concurrency = cmp.Or(c.Concurrency, 1)
	c.IdlePollMin = cmp.Or(c.IdlePollMin, DefaultIdlePollMin)
	c.IdlePollMax = max(cmp.Or(c.IdlePollMax, DefaultIdlePollMax), c.IdlePollMin)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// ErrDuplicateInstance is returned by Connect when another live process
// holds the worker instance id's alive key.
var ErrDuplicateInstance = errors.New("sdk: worker instance id already registered by a live process")

// Worker claims and processes executions. Create it with Connect; use
// Run for the handler loop, or ClaimNext for manual control. It is safe
// for concurrent use.
type Worker struct {
	vc *valkey.Client
	pg *postgres.Client // set by Connect on Postgres; vc is nil then
	// drv is the backend contract over vc or pg: the lease's renew,
	// complete and fail, and the Postgres claim, go through it.
	drv     backend.Driver
	cfg     WorkerConfig
	parts   model.PartitionConfig
	caps    []string
	capsCSV string
	capSet  map[string]bool
	log     *slog.Logger

	life       context.Context // cancelled = killed: no cleanup
	lifeCancel context.CancelFunc
	bg         sync.WaitGroup // heartbeat + renewals
	bgStopped  bool           // under mu: stopBG ran; no renewal starts after it

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
	wake          *eligibleWatch // nil with DisableNotifications or on Postgres
	// pgWake is the Postgres LISTEN on eligible work of the lanes (nil
	// on Valkey, with DisableNotifications, or when LISTEN failed).
	pgWake      *postgres.EligibleSubscription
	lastWindow  time.Time // last window read
	windowFound bool      // the last window read found work

	// soloParts are the solo partitions of the worker's lanes
	// (model.PartitionConfig.SoloPartition): every execution outside a
	// flow lives in its lane's one partition, so ClaimNext reads them
	// before any window. soloLanes are the lanes whose solo partition
	// each one is: the only lanes a solo scan reads there.
	soloParts []model.Partition
	soloLanes map[model.Partition][]string
	// spread is the round-robin read of the lanes that spread over
	// many partitions (spread_worker.go).
	spread spreadLanes

	mu     sync.Mutex
	leases map[*Lease]struct{}
	closed bool

	stats stats
}

// connectValkey is Connect on Valkey: it reads the deployment's
// partition config (defaults with a warning when absent), registers the
// worker instance (ff_register_worker: alive key, caps hash, workers
// index) and starts its heartbeat. cfg is filled and vc is non-nil.
func connectValkey(ctx context.Context, vc *valkey.Client, cfg WorkerConfig) (*Worker, error) {
	drv := valkey.NewDriver(vc)
	parts, err := readPartitions(ctx, drv, cfg.Logger)
	if err != nil {
		return nil, err
	}
	w := &Worker{vc: vc, drv: drv, cfg: cfg, parts: parts, log: cfg.Logger.With("worker_instance_id", cfg.InstanceID),
		capsCSV: valkey.CapabilityCSV(cfg.Capabilities), capSet: map[string]bool{}, leases: map[*Lease]struct{}{}}
	for _, c := range cfg.Capabilities {
		w.capSet[c] = true
	}
	w.caps = append([]string(nil), cfg.Capabilities...)
	w.cursor.Store(model.FNV1a64(cfg.InstanceID) % uint64(parts.Flow))
	w.reclaimCursor.Store(w.cursor.Load())
	w.soloLanes = map[model.Partition][]string{}
	for _, l := range cfg.Lanes {
		p := parts.SoloPartition(l)
		if !slices.Contains(w.soloParts, p) {
			w.soloParts = append(w.soloParts, p)
		}
		w.soloLanes[p] = append(w.soloLanes[p], l)
	}
	if err := w.initSpread(ctx); err != nil {
		return nil, err
	}
	// RefuseLive: a duplicate does not overwrite the live instance's
	// registration.
	rp := w.registerParams()
	rp.RefuseLive = true
	status, err := w.drv.RegisterWorker(ctx, rp)
	if err != nil {
		return nil, fmt.Errorf("sdk: register worker: %w", err)
	}
	if status == backend.WorkerAlive {
		return nil, fmt.Errorf("%w: %s (alive key %s exists; wait %s or pick another id)",
			ErrDuplicateInstance, cfg.InstanceID, model.WorkerAliveKey(cfg.Namespace, cfg.InstanceID), w.registryTTL())
	}
	w.life, w.lifeCancel = context.WithCancel(ctx)
	w.bg.Add(1)
	go w.heartbeat()
	if !cfg.DisableNotifications {
		w.wake = newEligibleWatch(cfg.Lanes, parts.Flow)
		w.bg.Add(1)
		go w.watchEligible()
	}
	w.log.Info("worker connected", "worker_id", cfg.WorkerID, "lanes", cfg.Lanes, "caps", w.capsCSV,
		"flow_partitions", parts.Flow)
	return w, nil
}

func (w *Worker) registryTTL() time.Duration { return max(2*w.cfg.LeaseTTL, time.Second) }

// stopBG waits for the worker's goroutines after its life ended. A lease
// claimed later (by a handler goroutine that outlived a killed Run)
// starts no renewal: an Add racing the Wait is a WaitGroup misuse the
// race detector reports.
func (w *Worker) stopBG() {
	w.mu.Lock()
	w.bgStopped = true
	w.mu.Unlock()
	w.bg.Wait()
}

func (w *Worker) registerParams() *backend.RegisterWorkerParams {
	return &backend.RegisterWorkerParams{Namespace: w.cfg.Namespace, InstanceID: w.cfg.InstanceID,
		WorkerID: w.cfg.WorkerID, Lanes: w.cfg.Lanes, Capabilities: w.cfg.Capabilities,
		TTLMs: w.registryTTL().Milliseconds(), NowMs: w.cfg.Clock().UnixMilli()}
}

// InstanceID returns the worker instance id.
func (w *Worker) InstanceID() string { return w.cfg.InstanceID }

// Partitions returns the partition config the worker scans.
func (w *Worker) Partitions() model.PartitionConfig { return w.parts }

// heartbeat refreshes the registration every third of the registry TTL
// and re-registers when the server forgot the instance.
func (w *Worker) heartbeat() {
	defer w.bg.Done()
	t := time.NewTicker(w.registryTTL() / 3)
	defer t.Stop()
	for {
		select {
		case <-w.life.Done():
			return
		case <-t.C:
		}
		res, err := w.drv.HeartbeatWorker(w.life, &backend.HeartbeatWorkerParams{Namespace: w.cfg.Namespace,
			InstanceID: w.cfg.InstanceID, NowMs: w.cfg.Clock().UnixMilli()})
		switch {
		case err != nil:
			if w.life.Err() == nil {
				w.log.Warn("worker heartbeat failed", "error", err)
			}
		case !res.Registered:
			if _, err := w.drv.RegisterWorker(w.life, w.registerParams()); err != nil && w.life.Err() == nil {
				w.log.Warn("worker re-register failed", "error", err)
			}
		}
	}
}

// ErrWorkerClosed is returned by ClaimNext and Run after Close.
var ErrWorkerClosed = errors.New("sdk: worker closed")

// Close stops the worker gracefully: leases still held (from ClaimNext
// callers that did not finish them) are handed back, background work
// stops, and the registration is removed (Valkey: the alive key;
// Postgres: the ff_worker_registry row, marked dead) so the instance id
// can be reused at once. ctx bounds the hand-back calls. Close is idempotent.
func (w *Worker) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	held := make([]*Lease, 0, len(w.leases))
	for l := range w.leases {
		held = append(held, l)
	}
	w.mu.Unlock()
	var errs []error
	graceful := w.life.Err() == nil
	if graceful {
		for _, l := range held {
			if err := l.handBack(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Stop the heartbeat before deregistering, so it cannot register the
	// instance again.
	w.lifeCancel()
	w.stopBG()
	if graceful {
		if _, err := w.drv.MarkWorkerDead(ctx, &backend.MarkWorkerDeadParams{Namespace: w.cfg.Namespace,
			InstanceID: w.cfg.InstanceID, Reason: "worker closed", NowMs: w.cfg.Clock().UnixMilli()}); err != nil {
			errs = append(errs, fmt.Errorf("sdk: deregister worker: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (w *Worker) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// candidate is one execution a scan round found.
type candidate struct {
	id      model.ExecutionID
	lane    string
	promote *model.Partition // due delayed member of this partition
}

// ClaimNext claims the next execution it can: it is ClaimBatch for one.
// It returns (nil, nil) when nothing was claimable. The returned lease
// renews itself until it is finished (Complete, Fail, Delay, Suspend) or
// lost.
func (w *Worker) ClaimNext(ctx context.Context) (*Lease, error) {
	ls, err := w.ClaimBatch(ctx, 1)
	if len(ls) > 0 {
		if err != nil {
			w.log.Warn("claim failed after a lease was taken", "error", err)
		}
		return ls[0], nil
	}
	return nil, err
}

// ClaimBatch claims up to n executions (n < 1 counts as 1), each with one
// fabric_claim_execution (grant and claim in one call), all of a round
// pipelined in one round trip. It first tries the eligible heads the
// previous scan round left over (for up to candidateMaxAge), picked at
// random so that workers of one lane reading the same heads spread their
// claims; a lost race moves on to another head rather than reading again
// (until maxLostRaces in a row). Then it claims from the lanes' solo
// partitions with fabric_claim_next (claimSolo: the server picks the
// heads, so workers of one lane do not collide; with PromoteDelayed it
// reads their heads instead, promoting due delayed ones), then reads
// notified partitions, and the next window of PartitionScanChunk flow
// partitions (one pipelined ZRANGEBYSCORE per partition and lane; a
// window that produced work is read again on the next call, up to 16
// rounds in a row, because work clusters). At most once per
// reclaimReadEvery, and unless DisableReclaim, it first takes over an
// expired lease (reclaimDue).
//
// Leases already taken are returned even when a later step fails; the
// error is then returned beside them.
func (w *Worker) ClaimBatch(ctx context.Context, n int) ([]*Lease, error) {
	n = max(n, 1)
	ls, err := w.claimBatch(ctx, n)
	return w.keepN(ctx, ls, n), err
}

// keepN keeps the first n leases and hands the others back. No claim
// path yields more than it was asked for (claimNextLeases claims refused
// heads by id only while short), so this is a safety net: a lease beyond
// what the caller asked for would stay leased and unrun until it
// expired, and Run's slots would count one lease too many.
func (w *Worker) keepN(ctx context.Context, ls []*Lease, n int) []*Lease {
	if len(ls) <= n {
		return ls
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, x := range ls[n:] {
		w.log.Warn("claimed more than asked; handing back", "execution_id", x.ID)
		if err := x.handBack(ctx); err != nil {
			w.log.Warn("hand back failed", "execution_id", x.ID, "error", err)
		}
	}
	return ls[:n]
}

func (w *Worker) claimBatch(ctx context.Context, n int) ([]*Lease, error) {
	if w.isClosed() {
		return nil, ErrWorkerClosed
	}
	n = max(n, 1)
	if w.pg != nil {
		return w.pgClaim(ctx, n)
	}
	var out []*Lease
	l, err := w.reclaimDue(ctx)
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
		ls, _, err := w.claimBuffered(ctx, n-len(out), nil)
		out = append(out, ls...)
		return err
	}
	if err := claim(); err != nil || len(out) >= n {
		return out, err
	}
	if w.cfg.PromoteDelayed {
		// The solo scan also promotes due delayed heads.
		if err := w.scanSolo(ctx); err != nil {
			return out, err
		}
		if err := claim(); err != nil || len(out) > 0 {
			return out, err
		}
	} else {
		ls, err := w.claimSolo(ctx, n-len(out))
		out = append(out, ls...)
		if err != nil || len(out) > 0 {
			return out, err
		}
	}
	if err := w.scanSpread(ctx); err != nil {
		return out, err
	}
	if err := claim(); err != nil || len(out) > 0 {
		return out, err
	}
	if w.wake != nil {
		if hot := w.notifiedFlowParts(); len(hot) > 0 {
			cands, err := w.scan(ctx, hot, w.headsPerKey(), nil)
			if err != nil {
				return out, err
			}
			w.keepBuffered(cands)
			err = claim()
			return out, err
		}
	}
	if !w.windowDue() {
		return out, nil
	}
	np := uint64(w.parts.Flow)
	chunk := min(uint64(PartitionScanChunk), np)
	cur := w.cursor.Load()
	start := cur % np
	window := make([]model.Partition, chunk)
	for s := range window {
		window[s] = model.Partition{Family: model.FamilyFlow, Index: uint16((start + uint64(s)) % np)}
	}
	cands, err := w.scan(ctx, window, w.headsPerKey(), nil)
	if err != nil {
		return out, err
	}
	w.scanMu.Lock()
	w.windowFound = len(cands) > 0
	w.scanMu.Unlock()
	promoted := false
	var eligible []candidate
	for _, c := range cands {
		if c.promote != nil {
			promoted = w.promoteDue(ctx, c, *c.promote) || promoted
			continue
		}
		eligible = append(eligible, c)
	}
	w.keepBuffered(eligible)
	if err := claim(); err != nil || len(out) > 0 {
		if w.sticky.Add(1) >= stickyRounds {
			w.sticky.Store(0)
			w.cursor.CompareAndSwap(cur, cur+chunk)
		}
		return out, err
	}
	if promoted {
		return out, nil // read this window again: it has work now
	}
	w.sticky.Store(0)
	w.cursor.CompareAndSwap(cur, cur+chunk)
	return out, nil
}

// claimSolo claims up to n executions from the lanes' solo partitions,
// where every execution outside a flow is, with one fabric_claim_next per
// partition and lane (claimNextOn) until n are claimed, lanes rotated per
// call. A lane known to be empty there (soloKnownEmpty) is not asked.
func (w *Worker) claimSolo(ctx context.Context, n int) ([]*Lease, error) {
	var out []*Lease
	rot := int(w.laneRR.Add(1))
	for _, p := range w.soloParts {
		lanes := w.soloLanes[p]
		for i := range lanes {
			if len(out) >= n {
				return out, nil
			}
			lane := lanes[(rot+i)%len(lanes)]
			if w.soloKnownEmpty(p, lane) {
				continue
			}
			ls, err := w.claimNextOn(ctx, p, lane, n-len(out))
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
func (w *Worker) notifiedFlowParts() []model.Partition {
	hot := w.wake.take()
	if w.cfg.PromoteDelayed {
		return hot
	}
	out := hot[:0]
	for _, p := range hot {
		if _, solo := w.soloLanes[p]; !solo {
			out = append(out, p)
		}
	}
	return out
}

// soloClaimFor picks the solo partition and lane a completion's
// pipelined claim asks (completeAndClaim): the finished lease's lane when
// it has a solo partition here, else the next lane in rotation. ok is
// false when the worker reads its solo partitions instead (PromoteDelayed)
// or has none.
func (w *Worker) soloClaimFor(lane string) (model.Partition, string, bool) {
	if w.cfg.PromoteDelayed || len(w.soloParts) == 0 {
		return model.Partition{}, "", false
	}
	if p := w.parts.SoloPartition(lane); slices.Contains(w.soloLanes[p], lane) {
		return p, lane, true
	}
	p := w.soloParts[int(w.laneRR.Add(1)%uint64(len(w.soloParts)))]
	return p, w.soloLanes[p][0], true
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
func (w *Worker) claimNextOn(ctx context.Context, p model.Partition, lane string, n int) ([]*Lease, error) {
	mark := w.soloMark(p)
	return w.claimNextLeases(ctx, p, lane, n, mark, w.vc.FCallBatch(ctx, []valkey.Call{w.claimNextCall(p, lane, n)})[0])
}

// soloMark is read before a fabric_claim_next on p is sent: what
// claimNextLeases needs to remember the lane as empty.
func (w *Worker) soloMark(p model.Partition) emptyMark {
	if w.wake == nil {
		return emptyMark{}
	}
	return w.wake.before(p)
}

// soloKnownEmpty reports whether a fabric_claim_next of lane on p would
// find no head, as far as the eligible-work notifications tell
// (eligibleWatch.knownEmpty): an idle worker otherwise asks again on
// every round of its idle sweep and after every completion.
func (w *Worker) soloKnownEmpty(p model.Partition, lane string) bool {
	return w.wake != nil && w.wake.knownEmpty(p, lane, w.cfg.Clock())
}

// claimNextCall is the fabric_claim_next of up to n claims of lane on
// partition p.
func (w *Worker) claimNextCall(p model.Partition, lane string, n int) valkey.Call {
	params := &valkey.FabricClaimNextParams{Partition: p, Lane: lane, WorkerID: w.cfg.WorkerID,
		WorkerInstanceID: w.cfg.InstanceID, LeaseTTLMs: w.cfg.LeaseTTL.Milliseconds(), GrantTTLMs: GrantTTL.Milliseconds(),
		WorkerCapabilitiesCSV: w.capsCSV, Claims: n, Heads: n + claimNextExtraHeads}
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
func (w *Worker) claimNextLeases(ctx context.Context, p model.Partition, lane string, n int, mark emptyMark, res valkey.Result) ([]*Lease, error) {
	if res.Err != nil {
		return nil, fmt.Errorf("sdk: %w", res.Err)
	}
	items, err := valkey.ParseFabricClaimNext(res.Reply)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	if w.wake != nil {
		w.wake.markEmpty(p, lane, mark, len(items) == 0, w.cfg.Clock())
	}
	var out []*Lease
	var refused []valkey.ClaimNextItem
	for _, it := range items {
		if it.Result != nil {
			out = append(out, w.leaseFromClaim(candidate{id: it.ExecutionID, lane: lane}, it.Result))
		} else {
			refused = append(refused, it)
		}
	}
	var errs []error
	for _, it := range refused {
		if len(out) >= n && !errors.Is(it.Err, valkey.CodeCapabilityMismatch) {
			continue
		}
		l, err := w.claimOutcome(ctx, candidate{id: it.ExecutionID, lane: lane}, valkey.Result{Err: it.Err})
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
func (w *Worker) scanSolo(ctx context.Context) error {
	if len(w.soloParts) == 0 {
		return nil
	}
	cands, err := w.scan(ctx, w.soloParts, soloHeads, w.soloLanes)
	if err != nil {
		return err
	}
	eligible := cands[:0:0]
	for _, c := range cands {
		if c.promote != nil {
			w.promoteDue(ctx, c, *c.promote)
			continue
		}
		eligible = append(eligible, c)
	}
	w.keepBuffered(eligible)
	return nil
}

// claimBuffered claims up to n buffered heads, all of a round in one
// pipelined round trip behind the calls of pre (sent in the first round
// even when no head is buffered; their results are returned). A lost race
// is replaced by the next buffered head in the next round, until n leases
// are taken or the buffer is empty.
func (w *Worker) claimBuffered(ctx context.Context, n int, pre []valkey.Call) ([]*Lease, []valkey.Result, error) {
	var leases []*Lease
	var preRes []valkey.Result
	for len(leases) < n || pre != nil {
		var batch []candidate
		for len(batch) < n-len(leases) {
			c, ok := w.nextBuffered()
			if !ok {
				break
			}
			batch = append(batch, c)
		}
		if len(batch) == 0 && pre == nil {
			break
		}
		calls := make([]valkey.Call, 0, len(pre)+len(batch))
		calls = append(calls, pre...)
		for _, c := range batch {
			calls = append(calls, w.claimCall(c))
		}
		res := w.vc.FCallBatch(ctx, calls)
		if pre != nil {
			preRes, res, pre = res[:len(pre)], res[len(pre):], nil
		}
		var errs []error
		for i, c := range batch {
			l, err := w.claimOutcome(ctx, c, res[i])
			if err != nil {
				errs = append(errs, err)
			} else if l != nil {
				leases = append(leases, l)
			}
			w.lostRace(err == nil && l == nil)
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
func (w *Worker) nextBuffered() (candidate, bool) {
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	if len(w.buffered) == 0 {
		return candidate{}, false
	}
	if w.cfg.Clock().Sub(w.bufferedAt) > candidateMaxAge {
		w.buffered = nil
		return candidate{}, false
	}
	i := rand.IntN(len(w.buffered))
	c := w.buffered[i]
	w.buffered[i] = w.buffered[len(w.buffered)-1]
	w.buffered = w.buffered[:len(w.buffered)-1]
	return c, true
}

// bufferedLen is how many fresh heads are buffered.
func (w *Worker) bufferedLen() int {
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	if w.cfg.Clock().Sub(w.bufferedAt) > candidateMaxAge {
		return 0
	}
	return len(w.buffered)
}

// lostRace notes a buffered head another worker took first; after
// maxLostRaces in a row the buffer is stale and dropped, so that the next
// claim reads fresh heads. won resets the count.
func (w *Worker) lostRace(lost bool) {
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	if !lost {
		w.lostRaces = 0
		return
	}
	if w.lostRaces++; w.lostRaces >= maxLostRaces {
		w.buffered, w.lostRaces = nil, 0
	}
}

// maxLostRaces is how many lost races in a row make the buffered heads
// stale.
const maxLostRaces = 2

// keepBuffered replaces the buffer with the eligible heads of a scan.
func (w *Worker) keepBuffered(cands []candidate) {
	var keep []candidate
	for _, c := range cands {
		if c.promote == nil {
			keep = append(keep, c)
		}
	}
	w.scanMu.Lock()
	w.buffered, w.bufferedAt, w.lostRaces = keep, w.cfg.Clock(), 0
	w.scanMu.Unlock()
}

// headsPerKey is how many eligible heads a scan reads per partition and
// lane: enough to feed this worker's concurrency for a few claims from
// one round trip.
func (w *Worker) headsPerKey() int64 {
	return int64(min(max(2*w.cfg.Concurrency, 4), 32))
}

// windowDue reports whether ClaimNext reads a window now: always without
// notifications or after a window that found work (a backlog), else at
// most every notifiedWindowEvery.
func (w *Worker) windowDue() bool {
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	now := w.cfg.Clock()
	if w.wake != nil && w.wake.up.Load() && !w.windowFound &&
		now.Sub(w.lastWindow) < notifiedWindowEvery && !now.Before(w.lastWindow) {
		return false
	}
	w.lastWindow = now
	return true
}

// scan reads up to heads eligible heads per partition of parts and lane
// in one DoMulti and returns candidates: due delayed heads to promote
// first (with PromoteDelayed), then eligible heads, lanes rotated per
// call. The lanes read on a partition are all the worker's, or only[p]
// when only is set.
func (w *Worker) scan(ctx context.Context, parts []model.Partition, heads int64, only map[model.Partition][]string) ([]candidate, error) {
	raw := w.vc.Raw()
	lanes := w.cfg.Lanes
	rot := int(w.laneRR.Add(1) % uint64(len(lanes)))
	now := strconv.FormatInt(w.cfg.Clock().UnixMilli(), 10)
	per := len(lanes)
	if w.cfg.PromoteDelayed {
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
			if w.cfg.PromoteDelayed {
				cmds = append(cmds, raw.B().Zrangebyscore().Key(pk.LaneDelayed(lane)).Min("-inf").Max(now).Limit(0, 1).Build())
				slots = append(slots, slot{part: p, lane: lane, delayed: true})
			}
		}
	}
	var promotes, eligible []candidate
	for i, r := range raw.DoMulti(ctx, cmds...) {
		ids, err := r.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("sdk: scan partitions: %w", err)
		}
		for _, s := range ids {
			id, err := model.ParseExecutionID(s)
			if slots[i].delayed {
				// The promoter cleans up members that do not parse.
				promotes = append(promotes, candidate{id: model.ExecutionID(s), lane: slots[i].lane, promote: &slots[i].part})
				continue
			}
			if err != nil || id.Partition() != slots[i].part {
				w.log.Warn("skipping malformed index member", "member", s, "partition", slots[i].part.Tag())
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

func (w *Worker) readJob(ctx context.Context, id model.ExecutionID) (*jobInfo, error) {
	raw := w.vc.Raw()
	k := model.KeysFor(id)
	res := raw.DoMulti(ctx,
		raw.B().Hmget().Key(k.Core()).Field("required_capabilities", "execution_kind", "namespace", "lane_id",
			"ownership_state", "lifecycle_phase", "flow_id").Build(),
		raw.B().Get().Key(k.Payload()).Build(),
		raw.B().Get().Key(k.Policy()).Build())
	vals, err := res[0].ToArray()
	if err != nil {
		return nil, fmt.Errorf("sdk: read %s: %w", id, err)
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
			return nil, fmt.Errorf("sdk: read %s: %w", id, err)
		}
		*dst = s
	}
	return ji, nil
}

// missingCaps returns the required capabilities this worker lacks.
func (w *Worker) missingCaps(csv string) []string {
	var miss []string
	for _, c := range splitCSV(csv) {
		if !w.capSet[c] {
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

// skippable reports claim errors that mean "someone else got it or it
// moved on": try the next candidate.
func skippable(err error) bool {
	code := valkey.CodeOf(err)
	return code != "" && (valkey.Retryable(code) || code == valkey.CodeExecutionNotFound ||
		code == valkey.CodeExecutionNotActive || code == valkey.CodeActiveAttemptExists)
}

// claimCall is the fabric_claim_execution of a candidate: a grant of
// GrantTTL and the claim in one call, the attempt timeout taken from the
// stored policy on the server.
func (w *Worker) claimCall(c candidate) valkey.Call {
	p := &valkey.FabricClaimParams{Claim: valkey.ClaimExecutionParams{ExecutionID: c.id, WorkerID: w.cfg.WorkerID,
		WorkerInstanceID: w.cfg.InstanceID, LaneID: c.lane, LeaseTTLMs: w.cfg.LeaseTTL.Milliseconds()},
		GrantTTLMs: GrantTTL.Milliseconds(), WorkerCapabilitiesCSV: w.capsCSV, AttemptTimeoutFromPolicy: true}
	return p.Call()
}

// tryClaim claims one candidate with one fabric_claim_execution.
func (w *Worker) tryClaim(ctx context.Context, c candidate) (*Lease, error) {
	return w.claimOutcome(ctx, c, w.vc.FCallBatch(ctx, []valkey.Call{w.claimCall(c)})[0])
}

// claimOutcome turns the result of a candidate's fabric_claim_execution
// into a lease, or nil when the candidate is not this worker's to run now
// (another worker got it, it moved on, or it needs capabilities this
// worker lacks: then it is parked in blocked:route, as FlowFabric's
// inline claim does). An interrupted attempt continues with
// ff_claim_resumed_execution and the grant the call left; a grant that
// already existed may be this worker id's (a scheduler's, or another
// instance's), so the claim is tried with it.
func (w *Worker) claimOutcome(ctx context.Context, c candidate, res valkey.Result) (*Lease, error) {
	if res.Err == nil {
		fr, err := valkey.ParseFabricClaim(res.Reply)
		if err != nil {
			return nil, fmt.Errorf("sdk: %w", err)
		}
		return w.leaseFromClaim(c, fr), nil
	}
	err := res.Err
	var le *valkey.LuaError
	switch {
	case errors.Is(err, valkey.CodeCapabilityMismatch) && errors.As(err, &le):
		w.blockRoute(ctx, c.id, splitCSV(le.Detail(0)))
		return nil, nil
	case errors.Is(err, valkey.CodeUseClaimResumedExecution):
		ji, err := w.readJob(ctx, c.id)
		if err != nil {
			return nil, err
		}
		return w.claimResumed(ctx, c, ji)
	case errors.Is(err, valkey.CodeGrantAlreadyExists):
		return w.claimWithExistingGrant(ctx, c)
	case skippable(err):
		return nil, nil
	}
	return nil, fmt.Errorf("sdk: %w", err)
}

// leaseFromClaim is the lease of a successful fabric claim of c.
func (w *Worker) leaseFromClaim(c candidate, fr *valkey.FabricClaimResult) *Lease {
	lane := cmp.Or(fr.Lane, c.lane)
	ji := &jobInfo{kind: fr.Kind, namespace: fr.Namespace, lane: lane, flow: fr.FlowID, payload: string(fr.Payload)}
	return w.newLease(c.id, lane, ji, &fr.ClaimResult)
}

// claimWithExistingGrant claims with a grant that was already there
// (ff_claim_execution checks it is this worker id's).
func (w *Worker) claimWithExistingGrant(ctx context.Context, c candidate) (*Lease, error) {
	ji, err := w.readJob(ctx, c.id)
	if err != nil {
		return nil, err
	}
	if ji.phase != model.PhaseRunnable {
		return nil, nil
	}
	cr, err := w.vc.ClaimExecution(ctx, &valkey.ClaimExecutionParams{ExecutionID: c.id, WorkerID: w.cfg.WorkerID,
		WorkerInstanceID: w.cfg.InstanceID, LaneID: c.lane, LeaseTTLMs: w.cfg.LeaseTTL.Milliseconds(),
		AttemptTimeoutMs: attemptTimeoutMs(ji.policy)})
	switch {
	case err == nil:
		return w.newLease(c.id, c.lane, ji, cr), nil
	case errors.Is(err, valkey.CodeUseClaimResumedExecution):
		return w.claimResumed(ctx, c, ji)
	case skippable(err):
		return nil, nil
	}
	return nil, fmt.Errorf("sdk: %w", err)
}

// blockRoute parks an execution this worker cannot run in blocked:route
// (ff_block_execution_for_admission, waiting_for_capable_worker) so the
// scan does not keep hitting it; the unblock scanner returns it to
// eligible once a capable worker registers. Best effort.
func (w *Worker) blockRoute(ctx context.Context, id model.ExecutionID, missing []string) {
	err := w.vc.BlockExecutionForAdmission(ctx, id, "waiting_for_capable_worker",
		"no connected worker satisfies required_capabilities", w.cfg.Clock().UnixMilli())
	if err != nil && !skippable(err) {
		w.log.Warn("block execution for capable worker failed", "execution_id", id, "error", err)
		return
	}
	w.log.Info("capability mismatch; execution blocked for a capable worker", "execution_id", id, "missing", missing)
}
