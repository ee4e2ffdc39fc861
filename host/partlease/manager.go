// Package partlease shares a deployment's partitions among fabric hosts.
// FlowFabric runs every scanner of every engine over every partition;
// fabric hosts instead split the partitions of each family (flow, budget,
// quota) so that each partition is scanned by exactly one host at a time,
// and a dead host's partitions are taken over after a lease TTL.
//
//	m, err := partlease.New(cfg, client, client.Partitions(), partlease.Options{})
//	if _, err := m.RunOnce(ctx); err != nil { ... } // own a share before the loops start
//	go m.Run(ctx)
//	...
//	g, ok := m.Begin(partition, timeout) // before each partition call
//	if ok { call with deadline min(now+timeout, g.Deadline); g.End() }
//	...
//	m.Leave(ctx) // after the loops stopped: peers take over at once
//
// # Protocol
//
//   - Membership: every step heartbeats a record in the fabric:hosts zset
//     that expires after TTL (fabric_host_heartbeat) and reads the live
//     members. The sorted member ids determine each host's fair share:
//     member k of n owns partitions [k·N/n, (k+1)·N/n) of a family of N.
//   - Leases: a host claims every partition of its share
//     (fabric_claim_partition, one lease hash per partition, carrying the
//     partition's hash tag). A free or expired lease is acquired under a
//     new fencing token, one higher than the partition's previous one; the
//     holder renews it every RenewEvery (TTL/3) under the same token.
//     Expiry is judged by the server's clock alone.
//   - Hand-off: a partition that left the host's share (a host joined) is
//     marked draining: no new call starts on it, and it is released as
//     soon as the calls in flight on it end (a batch boundary). A host
//     whose share is still held by a peer retries every RetryEvery, or
//     right when the peer's lease expires. Joins, releases and graceful
//     leaves are published on fabric:hosts:changed, so peers step at once
//     instead of at their next renewal.
//   - Fencing: Begin grants a call only while the lease's local expiry
//     (the send time of the claim that set it, plus TTL: never later than
//     the server's) is at least min(timeout, TTL/2) + Margin away, and
//     the call's deadline is capped at that expiry minus Margin. A host
//     that cannot renew (backend unreachable) therefore stops scanning
//     before any peer can acquire its leases. Every grant carries the
//     lease's token, which the host records with each partition call.
//   - Crash: a killed host's member record and leases expire after TTL;
//     survivors then own its partitions (within TTL of its last renewal).
//
// # Notes
//
//   - The ff_* functions are FlowFabric's and do not check fabric's
//     fencing tokens: exclusivity rests on the time bound above. A
//     Valkey data loss (a restart without persistence, a failover losing
//     writes) resets leases, members and tokens, and two hosts may then
//     scan one partition until the older holder's next renewal learns it
//     lost the lease. Scans stay correct meanwhile, because every ff_*
//     function re-checks state atomically (FlowFabric's own engines all
//     scan all partitions concurrently); the leases only remove the waste.
//   - A Manager is safe for concurrent use.
package partlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Families are the partition families leases cover, in display order.
var Families = []model.Family{model.FamilyFlow, model.FamilyBudget, model.FamilyQuota}

// Options are the host's hooks into a Manager.
type Options struct {
	// Clock is the local clock (default time.Now).
	Clock func() time.Time
	// Logger receives ownership changes and failures (default
	// slog.Default()).
	Logger *slog.Logger
	// OnGain is called, outside the Manager's lock, with every partition
	// acquired by a step (the host wakes that partition's timer loops).
	OnGain func(model.Partition)
}

// lease is this host's view of one lease it holds.
type lease struct {
	token int64
	// until is the local time the lease may have expired by: the claim's
	// send time plus TTL.
	until time.Time
	// draining: out of this host's share; released once inflight is 0.
	draining bool
	inflight int
}

// Manager holds this host's partition leases; see the package comment.
type Manager struct {
	cfg    Config
	c      Backend
	parts  model.PartitionConfig
	clock  func() time.Time
	log    *slog.Logger
	onGain func(model.Partition)

	stepMu sync.Mutex // one step at a time

	mu      sync.Mutex
	leases  map[model.Partition]*lease
	members []string
	joined  bool
	left    bool
	nudge   chan struct{}
}

// New validates cfg (filling its defaults) and returns a Manager for the
// partitions of parts on c (a *valkey.Client, say). It makes no call until
// RunOnce or Run.
func New(cfg Config, c Backend, parts model.PartitionConfig, o Options) (*Manager, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	if c == nil || isNil(c) {
		return nil, errors.New("partlease: a Valkey client is required")
	}
	if err := parts.Validate(); err != nil {
		return nil, fmt.Errorf("partlease: %w", err)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Manager{cfg: cfg, c: c, parts: parts, clock: o.Clock, log: o.Logger, onGain: o.OnGain,
		leases: map[model.Partition]*lease{}, nudge: make(chan struct{}, 1)}, nil
}

// HostID returns this host's id.
func (m *Manager) HostID() string { return m.cfg.HostID }

// Config returns the configuration in effect (defaults filled).
func (m *Manager) Config() Config { return m.cfg }

// StepResult is what one step did.
type StepResult struct {
	// At is when the step started (local clock).
	At time.Time `json:"at"`
	// Members are the live hosts, sorted (this host included).
	Members []string `json:"members"`
	// Share counts the partitions this host should own; Owned those it
	// holds after the step (draining ones included).
	Share int `json:"share"`
	Owned int `json:"owned"`
	// Acquired, Renewed, Lost (found held by a peer or expired) and
	// Released count this step's lease changes.
	Acquired int `json:"acquired"`
	Renewed  int `json:"renewed"`
	Lost     int `json:"lost"`
	Released int `json:"released"`
	// Draining counts leases out of the share still waiting for calls in
	// flight; Pending the partitions of the share a peer still holds.
	Draining int `json:"draining"`
	Pending  int `json:"pending"`
	// Failed counts claims and releases whose call failed.
	Failed int `json:"failed"`
	// Next is the wait until the next step.
	Next time.Duration `json:"next_ns"`
}

// Grant is permission to make one call on a partition; End it when the
// call returns. The zero Grant (no leases) bounds nothing.
type Grant struct {
	// Host and Token identify the lease the call runs under.
	Host  string
	Token int64
	// Deadline is when the call must have ended (zero: no bound).
	Deadline time.Time

	m *Manager
	l *lease
}

// End releases the grant; a draining partition whose last call ended is
// released by the next step, which End triggers.
func (g Grant) End() {
	if g.m == nil {
		return
	}
	g.m.mu.Lock()
	g.l.inflight--
	wake := g.l.draining && g.l.inflight == 0
	g.m.mu.Unlock()
	if wake {
		g.m.poke()
	}
}

// Bound returns the timeout of a call of timeout starting now under g.
func (g Grant) Bound(now time.Time, timeout time.Duration) (time.Duration, bool) {
	if g.Deadline.IsZero() {
		return timeout, false
	}
	if d := g.Deadline.Sub(now); d < timeout {
		return d, true
	}
	return timeout, false
}

// Begin grants a call of timeout on p when this host holds p's lease, not
// draining, with room for the call: the lease's local expiry at least
// min(timeout, TTL/2) + Margin away. The grant's Deadline caps the call.
func (m *Manager) Begin(p model.Partition, timeout time.Duration) (Grant, bool) {
	now := m.clock()
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[p]
	if l == nil || l.draining {
		return Grant{}, false
	}
	room := l.until.Sub(now) - m.cfg.Margin
	if room < min(timeout, m.cfg.TTL/2) {
		return Grant{}, false
	}
	l.inflight++
	return Grant{Host: m.cfg.HostID, Token: l.token, Deadline: now.Add(room), m: m, l: l}, true
}

// Owns reports whether this host holds p's lease and is not handing it
// off.
func (m *Manager) Owns(p model.Partition) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[p]
	return l != nil && !l.draining && l.until.After(m.clock())
}

// share returns the partitions member k of n owns.
func (m *Manager) share(k, n int) map[model.Partition]bool {
	out := map[model.Partition]bool{}
	if k < 0 || n == 0 {
		return out
	}
	for _, fam := range Families {
		count := int(m.parts.Count(fam))
		for i := k * count / n; i < (k+1)*count/n; i++ {
			out[model.Partition{Family: fam, Index: uint16(i)}] = true
		}
	}
	return out
}

// RunOnce heartbeats, claims this host's share, renews what it holds,
// marks what left its share as draining and releases the drained. On a
// heartbeat failure it changes nothing (held leases run out locally) and
// returns the error.
func (m *Manager) RunOnce(ctx context.Context) (StepResult, error) {
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	res, err := m.step(ctx)
	if s := m.cfg.Signals; s != nil {
		s.Step.Signal(res)
	}
	return res, err
}

func (m *Manager) step(ctx context.Context) (StepResult, error) {
	cfg := m.cfg
	t0 := m.clock()
	res := StepResult{At: t0, Next: cfg.RetryEvery}
	m.mu.Lock()
	left := m.left
	m.mu.Unlock()
	if left {
		return res, errors.New("partlease: the host left")
	}
	nowMs, members, err := m.c.HostHeartbeat(ctx, cfg.HostID, cfg.TTL)
	if err != nil {
		m.mu.Lock()
		res.Owned = len(m.leases)
		m.mu.Unlock()
		return res, fmt.Errorf("partlease: heartbeat: %w", err)
	}
	// localAt converts a server time to the local clock (early by the
	// heartbeat's one-way latency: wake-ups computed from it err early).
	localAt := func(ms int64) time.Time { return t0.Add(time.Duration(ms-nowMs) * time.Millisecond) }
	next := t0.Add(cfg.RenewEvery)
	ids := make([]string, 0, len(members))
	for _, mb := range members {
		ids = append(ids, mb.ID)
		if mb.ID != cfg.HostID {
			// A peer that stops heartbeating drops out then: step right after.
			if at := localAt(mb.ExpiresAtMs).Add(time.Millisecond); at.Before(next) {
				next = at
			}
		}
	}
	if !slices.Contains(ids, cfg.HostID) {
		ids = append(ids, cfg.HostID)
		slices.Sort(ids)
	}
	res.Members = ids
	share := m.share(slices.Index(ids, cfg.HostID), len(ids))
	res.Share = len(share)

	var claims []backend.PartitionClaim
	var releases []backend.PartitionClaim
	m.mu.Lock()
	changed := !slices.Equal(ids, m.members)
	m.members = ids
	for p, l := range m.leases {
		switch {
		case !l.until.After(t0):
			delete(m.leases, p) // ran out locally: a peer may hold it now
			res.Lost++
		case !share[p] && l.inflight == 0:
			delete(m.leases, p)
			releases = append(releases, backend.PartitionClaim{Partition: p, Token: l.token})
		default:
			if !share[p] {
				l.draining = true
			}
			claims = append(claims, backend.PartitionClaim{Partition: p, Token: l.token})
		}
	}
	for p := range share {
		if m.leases[p] == nil {
			claims = append(claims, backend.PartitionClaim{Partition: p})
		}
	}
	m.mu.Unlock()

	var gained []model.Partition
	if len(claims) > 0 {
		sent := m.clock()
		results := m.c.ClaimPartitions(ctx, cfg.HostID, cfg.TTL, claims)
		m.mu.Lock()
		for _, r := range results {
			l := m.leases[r.Partition]
			switch {
			case r.Err != nil:
				res.Failed++
			case r.Outcome == backend.ClaimHeld:
				if l != nil {
					delete(m.leases, r.Partition)
					res.Lost++
				}
				if share[r.Partition] {
					res.Pending++
					if at := localAt(r.ExpiresAtMs).Add(time.Millisecond); at.Before(next) {
						next = at
					}
				}
			default:
				if l == nil {
					l = &lease{}
					m.leases[r.Partition] = l
				}
				if r.Outcome == backend.ClaimAcquired {
					res.Acquired++
					gained = append(gained, r.Partition)
				} else {
					res.Renewed++
				}
				l.token, l.until = r.Token, sent.Add(cfg.TTL)
			}
		}
		m.mu.Unlock()
	}
	if len(releases) > 0 {
		// Gone from m.leases already: a release cut by ctx (the host
		// stopping mid hand-off) would leave the peer waiting out the TTL,
		// as Leave no longer knows them.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.TTL/2)
		defer cancel()
		for i, err := range m.c.ReleasePartitions(rctx, cfg.HostID, releases) {
			switch {
			case err == nil:
				res.Released++
			case errors.Is(err, backend.ErrNotLeaseOwner):
				res.Lost++
			default:
				res.Failed++
				m.log.Warn("partition lease release failed; it expires on its own", "host", cfg.HostID, "partition", releases[i].Partition.Tag(), "error", err)
			}
		}
	}
	m.mu.Lock()
	res.Owned = len(m.leases)
	for _, l := range m.leases {
		if l.draining {
			res.Draining++
		}
	}
	joined := m.joined
	m.joined = true
	m.mu.Unlock()

	if res.Pending > 0 && t0.Add(cfg.RetryEvery).Before(next) {
		next = t0.Add(cfg.RetryEvery)
	}
	res.Next = max(next.Sub(m.clock()), minStepGap)
	if !joined {
		m.publish(ctx, "joined")
	}
	if res.Released > 0 {
		m.publish(ctx, "released")
	}
	if changed || res.Acquired > 0 || res.Lost > 0 || res.Released > 0 {
		m.log.Info("partition leases", "host", cfg.HostID, "members", len(ids), "share", res.Share, "owned", res.Owned,
			"acquired", res.Acquired, "lost", res.Lost, "released", res.Released, "draining", res.Draining, "pending", res.Pending)
	}
	for _, p := range gained {
		if m.onGain != nil {
			m.onGain(p)
		}
	}
	return res, nil
}

// minStepGap is the shortest wait between two steps.
const minStepGap = 10 * time.Millisecond

func (m *Manager) publish(ctx context.Context, event string) {
	if err := m.c.PublishHostsChanged(ctx, event, m.cfg.HostID); err != nil {
		m.log.Debug("partition lease event not published; peers notice at their next step", "event", event, "error", err)
	}
}

// poke asks Run for a step now.
func (m *Manager) poke() {
	select {
	case m.nudge <- struct{}{}:
	default:
	}
}

// Run steps until ctx ends: every RenewEvery, every RetryEvery while a
// hand-off is pending, and at once when a peer announces a change or a
// draining partition's last call ends. It does not release anything when
// ctx ends; call Leave for that.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.listen(ctx) }()
	defer wg.Wait()
	failing := false
	for {
		res, err := m.RunOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !failing:
			failing = true
			m.log.Warn("partition lease step failed; held leases stay usable until they run out", "host", m.cfg.HostID, "owned", res.Owned, "error", err)
		case err == nil && failing:
			failing = false
			m.log.Info("partition lease steps recovered", "host", m.cfg.HostID, "owned", res.Owned)
		}
		t := time.NewTimer(res.Next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-m.nudge:
			t.Stop()
		}
	}
}

// listenRetry is the pause before resubscribing to HostsChannel.
const listenRetry = time.Second

// listen pokes the step loop whenever a peer publishes on HostsChannel.
func (m *Manager) listen(ctx context.Context) {
	for ctx.Err() == nil {
		_, err := m.c.SubscribeChannel(ctx, backend.HostsChannel, "fabric-hosts-"+m.cfg.HostID, func(msg string) {
			if peerEvent(msg, m.cfg.HostID) {
				m.poke()
			}
		}, nil)
		if ctx.Err() != nil {
			return
		}
		m.log.Debug("partition lease event subscription ended; resubscribing", "error", err)
		t := time.NewTimer(listenRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		m.poke() // events may have been missed meanwhile
	}
}

// peerEvent reports whether a HostsChannel message comes from another
// host ("<event> <host id>").
func peerEvent(msg, self string) bool {
	_, host, ok := strings.Cut(msg, " ")
	return ok && host != self
}

// Leave releases every lease this host holds and removes it from the
// members, then announces it, so peers take over at once. Call it after
// the loops using the leases have stopped; the Manager is done after.
func (m *Manager) Leave(ctx context.Context) error {
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	m.mu.Lock()
	m.left = true
	var rel []backend.PartitionClaim
	for p, l := range m.leases {
		rel = append(rel, backend.PartitionClaim{Partition: p, Token: l.token})
	}
	clear(m.leases)
	m.mu.Unlock()
	var errs []error
	for _, err := range m.c.ReleasePartitions(ctx, m.cfg.HostID, rel) {
		if err != nil && !errors.Is(err, backend.ErrNotLeaseOwner) {
			errs = append(errs, err)
		}
	}
	if err := m.c.HostLeave(ctx, m.cfg.HostID); err != nil {
		errs = append(errs, err)
	}
	m.publish(ctx, "left")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("partlease: leave (peers take over when the leases expire): %w", err)
	}
	m.log.Info("partition leases released", "host", m.cfg.HostID, "released", len(rel))
	return nil
}

// Status is this host's view of its leases.
type Status struct {
	HostID string `json:"host_id"`
	// TTLMs is the lease TTL.
	TTLMs int64 `json:"ttl_ms"`
	// Members are the live hosts at the last step.
	Members []string `json:"members"`
	// Owned are the partitions held, per family name, as compact ranges
	// ("0-127,200"); Count how many.
	Owned map[string]string `json:"owned"`
	Count int               `json:"count"`
	// Draining are held partitions being handed off.
	Draining map[string]string `json:"draining,omitempty"`
}

// Status returns this host's view of its leases.
func (m *Manager) Status() Status {
	m.mu.Lock()
	owned := map[model.Family][]int{}
	draining := map[model.Family][]int{}
	for p, l := range m.leases {
		owned[p.Family] = append(owned[p.Family], int(p.Index))
		if l.draining {
			draining[p.Family] = append(draining[p.Family], int(p.Index))
		}
	}
	st := Status{HostID: m.cfg.HostID, TTLMs: m.cfg.TTL.Milliseconds(), Members: slices.Clone(m.members), Count: len(m.leases),
		Owned: map[string]string{}}
	m.mu.Unlock()
	for _, fam := range Families {
		st.Owned[fam.String()] = Ranges(owned[fam])
		if len(draining[fam]) > 0 {
			if st.Draining == nil {
				st.Draining = map[string]string{}
			}
			st.Draining[fam.String()] = Ranges(draining[fam])
		}
	}
	return st
}
