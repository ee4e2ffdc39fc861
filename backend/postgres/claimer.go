package postgres

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// fullScanInterval is how often a claimer also claims across every
// partition, not only the lanes' solo partitions and the notified ones:
// for flow members no notification named (created before the worker
// listened, or beyond the notified bound).
const fullScanInterval = time.Second

// Claimer is the Postgres claim session of one worker (backend.Claimer):
// a claim is one ClaimNextN statement per lane, a completion is the
// group-committed CompleteExecution, and Wake is LISTEN fabric_eligible.
// Create it with Driver.NewClaimer.
type Claimer struct {
	d        *Driver
	cfg      backend.ClaimerConfig
	parts    model.PartitionConfig
	log      *slog.Logger
	rr       atomic.Uint64 // lane rotation
	lastFull atomic.Int64  // unix ns of the last full scan
	// fullAgain: the last full scan claimed work and there is no
	// subscription to note its partition in, so the next Claim scans every
	// partition again (work clusters).
	fullAgain atomic.Bool
	wake      *EligibleSubscription
}

var _ backend.Claimer = (*Claimer)(nil)

// NewClaimer implements backend.ClaimerDriver. With cfg.Notifications it
// LISTENs for eligible work of the lanes (SubscribeEligible); a LISTEN
// that fails is logged and the worker polls only.
func (d *Driver) NewClaimer(ctx context.Context, cfg *backend.ClaimerConfig) (backend.Claimer, error) {
	if cfg == nil || cfg.WorkerID == "" || cfg.WorkerInstanceID == "" || len(cfg.Lanes) == 0 || cfg.LeaseTTLMs <= 0 {
		return nil, fmt.Errorf("%w: new claimer: a worker id, an instance id, lanes and lease_ttl_ms > 0 are required", backend.ErrInvalidInput)
	}
	c := &Claimer{d: d, cfg: *cfg, parts: d.c.Partitions(), log: cmp.Or(cfg.Logger, slog.Default())}
	if cfg.Notifications {
		sub, err := d.c.SubscribeEligible(ctx, cfg.Lanes)
		if err != nil {
			c.log.Warn("eligible-work notifications unavailable; polling only", "error", err)
		} else {
			c.wake = sub
		}
	}
	return c, nil
}

// Claim implements backend.Claimer: each lane is tried once, from a
// rotating lane, until n are claimed; on a lane's solo partition the n
// are picked and leased in one statement (ClaimNextN). Then the
// partitions LISTEN fabric_eligible named for the lanes (flow members,
// which live on their flow's partition), each a ClaimNextN there. At most
// once per fullScanInterval it also looks at every partition (one probe
// per partition under a generic plan), and where that found work is
// claimed from first at the next call.
func (c *Claimer) Claim(ctx context.Context, n int) ([]*backend.ClaimResult, error) {
	n = max(n, 1)
	lanes := c.cfg.Lanes
	start := c.rr.Add(1)
	now := time.Now().UnixNano()
	full := c.fullAgain.Swap(false)
	if last := c.lastFull.Load(); now-last >= int64(fullScanInterval) && c.lastFull.CompareAndSwap(last, now) {
		full = true
	}
	claim := func(lane string, parts []uint16) ([]*backend.ClaimResult, error) {
		return c.d.ClaimNextN(ctx, &backend.ClaimNextParams{LaneID: lane, WorkerID: c.cfg.WorkerID,
			WorkerInstanceID: c.cfg.WorkerInstanceID, Capabilities: c.cfg.Capabilities, LeaseTTLMs: c.cfg.LeaseTTLMs,
			Partitions: parts}, n)
	}
	var out []*backend.ClaimResult
	for i := range lanes {
		if n <= 0 {
			return out, nil
		}
		lane := lanes[(start+uint64(i))%uint64(len(lanes))]
		crs, err := claim(lane, []uint16{c.parts.SoloPartition(lane).Index})
		if err != nil {
			return out, err
		}
		n, out = n-len(crs), append(out, crs...)
	}
	if c.wake != nil {
		ws := c.wake.Notified()
		for i, w := range ws {
			if n <= 0 {
				c.wake.Note(w) // not reached: next time
				continue
			}
			if w.Partition == c.parts.SoloPartition(w.Lane).Index {
				continue // the solo pass read it
			}
			crs, err := claim(w.Lane, []uint16{w.Partition})
			if err != nil {
				for _, rest := range ws[i:] { // this one and those not reached: next time
					c.wake.Note(rest)
				}
				return out, err
			}
			if len(crs) == n {
				c.wake.Note(w) // there may be more
			}
			n, out = n-len(crs), append(out, crs...)
		}
	}
	if !full {
		return out, nil
	}
	for i := range lanes {
		if n <= 0 {
			break
		}
		lane := lanes[(start+uint64(i))%uint64(len(lanes))]
		crs, err := claim(lane, nil)
		if err != nil {
			return out, err
		}
		// Where the scan found work there may be more: the next Claim
		// claims there in one statement for every free slot.
		for _, cr := range crs {
			if c.wake != nil {
				c.wake.Note(NotifiedWork{Partition: cr.ExecutionID.Partition().Index, Lane: lane})
			} else {
				c.fullAgain.Store(true)
			}
		}
		n, out = n-len(crs), append(out, crs...)
	}
	return out, nil
}

// CompleteAndClaim implements backend.Claimer: the completion alone
// (group-committed with other completions); it claims nothing, since the
// run loop frees the slot before the completion (FreesSlotBeforeEnd) and
// claims while it is in flight.
func (c *Claimer) CompleteAndClaim(ctx context.Context, p *backend.CompleteExecutionParams, _ int) ([]*backend.ClaimResult, error, error) {
	return nil, c.d.CompleteExecution(ctx, p), nil
}

// ClaimExecution implements backend.Claimer: Driver.ClaimExecution (one
// transaction, the row locked). lane is not needed.
func (c *Claimer) ClaimExecution(ctx context.Context, id model.ExecutionID, _ string) (*backend.ClaimResult, error) {
	return c.d.ClaimExecution(ctx, &backend.ClaimExecutionParams{ExecutionID: id, WorkerID: c.cfg.WorkerID,
		WorkerInstanceID: c.cfg.WorkerInstanceID, Capabilities: c.cfg.Capabilities, LeaseTTLMs: c.cfg.LeaseTTLMs})
}

// ResolveDependencies implements backend.Claimer: nothing, on Postgres
// the host's pg_dependency_reconciler resolves a flow member's edges,
// pushed by LISTEN ff_completion.
func (c *Claimer) ResolveDependencies(context.Context, model.ExecutionID, string) error { return nil }

// Wake implements backend.Claimer: the LISTEN fabric_eligible
// subscription's channel, nil without one.
func (c *Claimer) Wake() <-chan struct{} {
	if c.wake == nil {
		return nil
	}
	return c.wake.C
}

// NotificationsUp implements backend.Claimer. It is always false on
// Postgres: the LISTEN wakes an idle worker but the claim does not rely
// on it, and its health is not tracked.
func (c *Claimer) NotificationsUp() bool { return false }

// SweepRounds implements backend.Claimer: one Claim tries every lane.
func (c *Claimer) SweepRounds() int { return 1 }

// FreesSlotBeforeEnd implements backend.Claimer: true, lease-ending
// calls are group-committed, and the worker claims while they are in
// flight.
func (c *Claimer) FreesSlotBeforeEnd() bool { return true }

// SpreadPartitions implements backend.Claimer: none, lanes do not spread
// on Postgres.
func (c *Claimer) SpreadPartitions() []model.Partition { return nil }

// Close implements backend.Claimer: it ends the LISTEN.
func (c *Claimer) Close() {
	if c.wake != nil {
		c.wake.Close()
	}
}

// LaneSpread implements backend.LaneSpreadDriver: always the default
// (lanes do not spread on Postgres).
func (d *Driver) LaneSpread(context.Context, string) (model.LaneSpread, error) {
	return model.LaneSpread{}, nil
}

// SetLaneSpread implements backend.LaneSpreadDriver: backend.ErrUnsupported.
func (d *Driver) SetLaneSpread(_ context.Context, lane string, _ model.LaneSpread) error {
	return fmt.Errorf("%w: lane spreading (lane %q) needs Valkey", backend.ErrUnsupported, lane)
}
