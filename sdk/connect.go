package sdk

import (
	"context"

	"github.com/fabric-host/fabric/backend"
)

// Connect validates cfg, registers the worker instance on the backend b
// and starts its heartbeat. b is either backend's client (*valkey.Client,
// *postgres.Client) or its backend.Driver; the same Worker, Lease, Job
// and Run work on both.
//
//	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "mailer", Lanes: []string{"emails"}})
//	defer w.Close(context.Background())
//	err := w.Run(ctx, handler)
//
// ctx bounds the worker's whole life: when it ends, heartbeats and lease
// renewals stop at once and nothing is handed back — to the server this
// is a crash, and the leases expire. Call Close for a graceful stop.
//
// # Valkey
//
// Connect reads the deployment's partition config (defaults with a
// warning when absent) and registers the instance with
// ff_register_worker (alive key, caps hash, workers index).
//
// # Postgres
//
//   - A claim is one transaction per lane (SELECT … FOR UPDATE SKIP
//     LOCKED of the best eligible execution, highest priority then
//     oldest, whose required capabilities the worker offers), so
//     concurrent workers never claim one execution twice.
//   - Leases renew, complete, fail (retry per the stored policy, delayed
//     by its backoff), delay and hand back as on Valkey; a Client's State,
//     Result, CancelExecution, flows (CreateFlow, Flow.Add, AddJoin,
//     CancelFlow), Lease.Cancel, Suspend on one waitpoint, DeliverSignal,
//     ResumeSignals and attempt streams work too; a worker
//     does not resolve its flow members' dependencies
//     (WorkerConfig.ResolveDependencies): the host's
//     pg_dependency_reconciler does, pushed by LISTEN ff_completion.
//   - The instance registers in ff_worker_registry (upstream's RFC-025
//     worker registry: namespace, worker id, lanes, capabilities, TTL
//     twice the lease TTL), heartbeats every third of the TTL (registering
//     again when the registration lapsed) and is marked dead on Close. An
//     instance id with a live registration is refused
//     (ErrDuplicateInstance); one registered under another worker id too.
//   - An expired lease is reclaimed by a worker of its lane as on Valkey,
//     with or without a host: a new attempt of type "reclaim" (marked
//     expired by the pg_lease_expiry scanner, or by the worker's own
//     reclaim pass once a second; WorkerConfig.DisableReclaim turns that
//     off). Delayed executions are promoted by pg_delayed_promoter;
//     WorkerConfig.PromoteDelayed has no effect.
//   - An unmigrated database is refused with backend.ErrNotMigrated.
func Connect(ctx context.Context, b backend.Provider, cfg WorkerConfig) (*Worker, error) {
	drv, err := driverOf("backend", b)
	if err != nil {
		return nil, err
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	parts, err := readPartitions(ctx, drv, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return connectDriver(ctx, drv.BindPartitions(parts), parts, cfg)
}

// driverOf resolves a Provider to its backend.Driver, or an error naming
// field when there is none (no provider, or a nil client or driver).
func driverOf(field string, b backend.Provider) (backend.Driver, error) {
	if b == nil {
		return nil, invalid(field, "is required (a *valkey.Client or a *postgres.Client, or a backend.Driver)")
	}
	d := b.Driver()
	if d == nil {
		return nil, invalid(field, "is required (got a nil %T)", b)
	}
	return d, nil
}

// BackendName is the name of the backend the worker runs on: "valkey" or
// "postgres" (backend.Driver.Name).
func (w *Worker) BackendName() string { return w.drv.Name() }

// BackendName is the name of the backend the client runs on: "valkey" or
// "postgres" (backend.Driver.Name).
func (c *Client) BackendName() string { return c.drv.Name() }
