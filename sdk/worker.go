package sdk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Worker defaults.
const (
	// DefaultLeaseTTL is the lease lifetime (FlowFabric's worker default).
	DefaultLeaseTTL = 30 * time.Second
	// GrantTTL is the claim-grant lifetime the SDK asks for (5000 ms).
	GrantTTL = 5 * time.Second
	// PartitionScanChunk is how many partitions one ClaimNext round reads
	// on Valkey.
	PartitionScanChunk = 32
	// DefaultIdlePollMin and DefaultIdlePollMax bound Run's idle backoff.
	DefaultIdlePollMin = 10 * time.Millisecond
	DefaultIdlePollMax = 500 * time.Millisecond
	// DefaultShutdownTimeout is how long Run lets in-flight handlers
	// finish after its context ends.
	DefaultShutdownTimeout = 10 * time.Second
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
	// drv is the backend contract: the lease's renew, complete and fail
	// go through it.
	drv backend.Driver
	// claimer is the worker's claim session on drv: the claim and
	// complete-and-claim hot path.
	claimer backend.Claimer
	cfg     WorkerConfig
	parts   model.PartitionConfig
	log     *slog.Logger

	life       context.Context // cancelled = killed: no cleanup
	lifeCancel context.CancelFunc
	bg         sync.WaitGroup // heartbeat + renewals + the claimer's close
	bgStopped  bool           // under mu: stopBG ran; no renewal starts after it

	mu     sync.Mutex
	leases map[*Lease]struct{}
	closed bool

	stats stats
}

// connectDriver is Connect on drv, bound to the deployment's partition
// config parts: it opens the worker's claim session, registers the
// worker instance (RefuseLive: a duplicate does not overwrite the live
// instance's registration) and starts its heartbeat. cfg is filled.
func connectDriver(ctx context.Context, drv backend.Driver, parts model.PartitionConfig, cfg WorkerConfig) (*Worker, error) {
	w := &Worker{drv: drv, cfg: cfg, parts: parts, log: cfg.Logger.With("worker_instance_id", cfg.InstanceID),
		leases: map[*Lease]struct{}{}}
	cl, err := drv.NewClaimer(ctx, &backend.ClaimerConfig{WorkerID: cfg.WorkerID, WorkerInstanceID: cfg.InstanceID,
		Lanes: cfg.Lanes, Capabilities: cfg.Capabilities, LeaseTTLMs: cfg.LeaseTTL.Milliseconds(),
		GrantTTLMs: GrantTTL.Milliseconds(), Concurrency: cfg.Concurrency, DisableReclaim: cfg.DisableReclaim,
		PromoteDelayed: cfg.PromoteDelayed, ResolveDependencies: cfg.ResolveDependencies,
		Notifications: !cfg.DisableNotifications, Clock: cfg.Clock, Logger: w.log})
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	w.claimer = cl
	rp := w.registerParams()
	rp.RefuseLive = true
	status, err := w.drv.RegisterWorker(ctx, rp)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("sdk: register worker: %w", err)
	}
	if status == backend.WorkerAlive {
		cl.Close()
		return nil, fmt.Errorf("%w: %s (%s holds a live registration of it; wait %s or pick another id)",
			ErrDuplicateInstance, cfg.InstanceID, drv.Name(), w.registryTTL())
	}
	w.life, w.lifeCancel = context.WithCancel(ctx)
	w.bg.Add(2)
	go w.heartbeat()
	go func() {
		// The claim session's background work (notifications) ends with
		// the worker's life.
		defer w.bg.Done()
		<-w.life.Done()
		cl.Close()
	}()
	w.log.Info("worker connected", "backend", drv.Name(), "worker_id", cfg.WorkerID, "lanes", cfg.Lanes,
		"caps", cfg.Capabilities, "flow_partitions", parts.Flow)
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

// ClaimBatch claims up to n executions (n < 1 counts as 1) through the
// worker's claim session (backend.Claimer.Claim). On Valkey
// (backend/valkey.Claimer) each is one fabric_claim_execution (grant and
// claim in one call), all of a round pipelined in one round trip: it
// first tries the eligible heads the previous scan round left over,
// picked at random so that workers of one lane spread their claims, then
// claims from the lanes' solo partitions with fabric_claim_next (the
// server picks the heads, so workers of one lane do not collide; with
// PromoteDelayed it reads their heads instead, promoting due delayed
// ones), then reads notified partitions, and the next window of
// PartitionScanChunk flow partitions. At most once a second, and unless
// DisableReclaim, it first takes over an expired lease. On Postgres
// (backend/postgres.Claimer) each lane is one SELECT … FOR UPDATE SKIP
// LOCKED statement claiming up to n.
//
// Leases already taken are returned even when a later step fails; the
// error is then returned beside them.
func (w *Worker) ClaimBatch(ctx context.Context, n int) ([]*Lease, error) {
	n = max(n, 1)
	ls, err := w.claimBatch(ctx, n)
	return w.keepN(ctx, ls, n), err
}

// keepN keeps the first n leases and hands the others back. No claim
// session yields more than it was asked for, so this is a safety net: a lease beyond
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
	crs, err := w.claimer.Claim(ctx, max(n, 1))
	if err != nil {
		err = fmt.Errorf("sdk: %w", err)
	}
	return w.newLeases(crs), err
}

// newLeases turns claims into leases.
func (w *Worker) newLeases(crs []*backend.ClaimResult) []*Lease {
	if len(crs) == 0 {
		return nil
	}
	out := make([]*Lease, len(crs))
	for i, cr := range crs {
		out[i] = w.newLease(cr)
	}
	return out
}

// NotificationsUp reports whether the worker is subscribed to
// eligible-work notifications (false with DisableNotifications, on
// Postgres, and while the subscription is down). The workers connected
// through one *valkey.Client share one subscription.
func (w *Worker) NotificationsUp() bool { return w.claimer.NotificationsUp() }

// SpreadPartitions returns the partitions the worker reads round robin for
// its spreading lanes (none when no lane of the worker spreads).
func (w *Worker) SpreadPartitions() []model.Partition { return w.claimer.SpreadPartitions() }

func (w *Worker) servesLane(lane string) bool { return slices.Contains(w.cfg.Lanes, lane) }
