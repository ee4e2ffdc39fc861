package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/valkey"
)

// ErrNotOnPostgres is returned (wrapped) by SDK calls the Postgres backend
// does not offer yet (pending and extra waitpoints, WaitForChildren,
// periodic schedules).
var ErrNotOnPostgres = errors.New("sdk: not available on the Postgres backend")

func errNotOnPostgres(op string) error { return fmt.Errorf("%w: %s", ErrNotOnPostgres, op) }

// ConnectPostgres is Connect(ctx, pc, cfg).
//
// Deprecated: call Connect, which takes either backend's client.
func ConnectPostgres(ctx context.Context, pc *postgres.Client, cfg WorkerConfig) (*Worker, error) {
	if pc == nil {
		return nil, invalid("backend", "a *postgres.Client is required")
	}
	return Connect(ctx, pc, cfg)
}

// connectPostgres is Connect on Postgres: it checks the schema,
// registers the instance in ff_worker_registry and starts its heartbeat.
// cfg is filled and pc is non-nil.
func connectPostgres(ctx context.Context, pc *postgres.Client, cfg WorkerConfig) (*Worker, error) {
	if err := postgres.CheckSchema(ctx, pc.Pool()); err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	w := &Worker{pg: pc, drv: postgres.NewDriver(pc), cfg: cfg, parts: pc.Partitions(), log: cfg.Logger.With("worker_instance_id", cfg.InstanceID),
		capsCSV: valkey.CapabilityCSV(cfg.Capabilities), capSet: map[string]bool{}, leases: map[*Lease]struct{}{}}
	for _, c := range cfg.Capabilities {
		w.capSet[c] = true
	}
	w.caps = append([]string(nil), cfg.Capabilities...)
	p := w.registerParams()
	p.RefuseLive = true
	status, err := w.drv.RegisterWorker(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("sdk: register worker: %w", err)
	}
	if status == backend.WorkerAlive {
		return nil, fmt.Errorf("%w: %s (ff_worker_registry has a live registration; wait %s or pick another id)",
			ErrDuplicateInstance, cfg.InstanceID, w.registryTTL())
	}
	w.life, w.lifeCancel = context.WithCancel(ctx)
	w.bg.Add(1)
	go w.heartbeat()
	w.pgSubscribeEligible(ctx)
	w.log.Info("worker connected (postgres)", "worker_id", cfg.WorkerID, "lanes", cfg.Lanes, "caps", w.capsCSV)
	return w, nil
}

// pgFullScanEvery is how often (in ClaimNext rounds) a Postgres worker
// claims across every partition rather than the lanes' solo partitions.
const pgFullScanEvery = 8

// pgClaim claims up to n executions, trying each lane once from a
// rotating lane until n are claimed: on a lane's solo partition the n
// are picked and leased in one statement (ClaimNextN).
func (w *Worker) pgClaim(ctx context.Context, n int) ([]*Lease, error) {
	lanes := w.cfg.Lanes
	start := w.laneRR.Add(1)
	// Solo executions of a lane all live on its solo partition: a cheap,
	// pruned claim. Every pgFullScanEvery-th round also looks at every
	// partition (flow members of the lane), which costs a probe per
	// partition.
	full := w.cursor.Add(1)%pgFullScanEvery == 0
	drv := postgres.NewDriver(w.pg)
	var out []*Lease
	for i := range lanes {
		if len(out) >= n {
			break
		}
		lane := lanes[(start+uint64(i))%uint64(len(lanes))]
		p := &backend.ClaimNextParams{LaneID: lane, WorkerID: w.cfg.WorkerID,
			WorkerInstanceID: w.cfg.InstanceID, Capabilities: w.caps, LeaseTTLMs: w.cfg.LeaseTTL.Milliseconds()}
		if !full {
			p.Partitions = []uint16{w.parts.SoloPartition(lane).Index}
		}
		crs, err := drv.ClaimNextN(ctx, p, n-len(out))
		if err != nil {
			return out, fmt.Errorf("sdk: %w", err)
		}
		for _, cr := range crs {
			ji := &jobInfo{kind: cr.Kind, namespace: cr.Namespace, lane: cr.LaneID, flow: cr.FlowID, payload: string(cr.Payload)}
			out = append(out, w.newLease(cr.ExecutionID, cr.LaneID, ji, &valkey.ClaimResult{LeaseID: cr.Fence.LeaseID,
				LeaseEpoch: cr.Fence.LeaseEpoch, ExpiresAt: cr.ExpiresAt, AttemptID: cr.Fence.AttemptID,
				AttemptIndex: cr.Fence.AttemptIndex, AttemptType: cr.AttemptType}))
		}
	}
	return out, nil
}

// pgSubscribeEligible starts the worker's LISTEN on eligible work of its
// lanes (postgres.SubscribeEligible), closed when the worker's life ends:
// an idle Run wakes at once instead of at its next poll. Without it
// (DisableNotifications, or a failed LISTEN) Run polls only.
func (w *Worker) pgSubscribeEligible(ctx context.Context) {
	if w.cfg.DisableNotifications {
		return
	}
	sub, err := w.pg.SubscribeEligible(ctx, w.cfg.Lanes)
	if err != nil {
		w.log.Warn("eligible-work notifications unavailable; polling only", "error", err)
		return
	}
	w.pgWake = sub
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		<-w.life.Done()
		sub.Close()
	}()
}

// pgCode reports a logical error of the Postgres backend (not worth
// retrying as a transport failure).
func pgCode(err error) bool {
	var code postgres.ErrorCode
	return errors.As(err, &code)
}

// pgLeaseGone reports Postgres errors that mean the lease cannot come
// back.
func pgLeaseGone(err error) bool {
	for _, c := range []postgres.ErrorCode{postgres.CodeStaleLease, postgres.CodeLeaseExpired,
		postgres.CodeExecutionNotActive, postgres.CodeExecutionNotFound} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}
