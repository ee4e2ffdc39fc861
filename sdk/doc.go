// Package sdk is fabric's Go client and worker SDK: it creates executions
// and flows, and runs workers that claim, renew, complete, fail, delay and
// suspend them, speaking FlowFabric's Valkey data model through the
// flowfabric function library.
//
// [Open] goes from a URL to a ready [Client] (the program imports the
// driver of its scheme, backend/valkey or backend/postgres, for effect).
// A producer enqueues; options are validated before anything is sent;
// [Client.Wait] returns an execution's final state when it ends, pushed
// by the backend:
//
//	c, err := sdk.Open(ctx, "redis://localhost:6379", sdk.ClientConfig{})
//	defer c.Close()
//	id, err := sdk.EnqueueJSON(ctx, c, "email.send", map[string]string{"to": "a@b"},
//		sdk.WithLane("emails"), sdk.WithIdempotencyKey("welcome:a@b"),
//		sdk.WithRetry(3, sdk.ExponentialBackoff(time.Second, time.Minute, 2)))
//	st, err := c.Wait(ctx, id) // st.PublicState: completed, failed, cancelled, …
//
// A consumer runs a [Worker] with a [Mux] routing jobs by kind through
// middlewares:
//
//	mux := sdk.NewMux()
//	mux.Use(sdk.Recover(nil), sdk.Logging(nil)) // nil: slog.Default()
//	sdk.HandleJSON(mux, "email.send", func(ctx context.Context, job *sdk.Job, m map[string]string) error {
//		return send(ctx, []byte(m["to"])) // nil completes, an error fails (retry per policy)
//	})
//	w, err := c.NewWorker(ctx, sdk.WorkerConfig{WorkerID: "mailer", Lanes: []string{"emails"}})
//	defer w.Close(context.Background())
//	err = w.Run(ctx, mux.ServeJob)
//
// [NewClient] and [Connect] take a client the program built itself (a
// *valkey.Client, a *postgres.Client, or a backend.Driver).
//
// Beyond single jobs: [Client.EnqueueMany] sends a batch in one round
// trip; [Flow.AddJoin] builds DAGs with AllOf, AnyOf and Quorum joins, and
// [Job.WaitForChildren] fans out at run time; [Job.Suspend] parks a job on
// one or several waitpoints (any one of them, all with
// [SuspendSpec].AllWaitpoints, or a quorum; or a pending one,
// [Lease.CreatePendingWaitpoint], with [Job.TrySuspend] going on at once
// when its buffered signals already satisfy it) until a signal delivered
// with [Client.DeliverSignal] resumes it, and the resumed attempt reads
// those signals with [Job.ResumeSignals]; [Client.AddPeriodic] schedules
// jobs on an interval or a cron expression (fired by the hosts' periodic
// plugin, pg_periodic on Postgres); [Job.ReportProgress] reports progress, [Job.ReportUsage] spends
// a budget ([Client.CreateBudget], [Client.BudgetUsage]) and [Job.Admit]
// (or the [Admitting] middleware) takes a slot of a rate or concurrency
// quota ([Client.CreateQuota], [Client.QuotaUsage]); frames have modes ([Frame].Mode) and
// [Client.TailAttemptStream] follows a stream live;
// [Worker.ClaimExecution] claims a given execution (on both backends). The examples/
// directory has runnable programs.
//
// On Postgres the same Worker, Lease, Job and Run work over a
// *postgres.Client: pass it to [Connect] and as ClientConfig.Backend
// (both constructors take either backend's client). Claims are SELECT … FOR
// UPDATE SKIP LOCKED transactions; [Client.State], [Client.Result] and
// [Client.CancelExecution] read and write the ff_* tables;
// [Client.CreateFlow], [Flow.Add] and [Flow.AddJoin] build flows (edges,
// edge group and the child's state in one transaction; the host's
// pg_dependency_reconciler releases children as parents complete);
// [Client.CancelFlow], [Lease.Cancel], suspension (pending, extra and
// composite-condition waitpoints included), [Job.WaitForChildren],
// [Client.DeliverSignal], [Lease.ResumeSignals] and attempt streams go
// through the driver's ControlDriver operations; budgets, quotas
// ([Lease.Admit], [Admitting]) and progress and usage reports through its
// BudgetDriver operations (the host's pg_budget_reset applies
// [Budget.ResetEvery]); periodic schedules ([Client.AddPeriodic],
// [Client.RemovePeriodic], [Client.ListPeriodic]) through its
// PeriodicDriver operations (fabric's fabric_periodic table, fired by the
// host's pg_periodic plugin); worker-side dependency resolution does nothing (the host's reconciler
// resolves).
//
// # Notes
//
//   - Inputs are validated before any network call: a bad lane, priority,
//     delay or capability returns an error wrapping [ErrInvalidInput].
//   - A worker claims through its backend's claim session
//     (backend.Claimer, opened by [Connect]): on Valkey workers scan
//     partitions themselves (FlowFabric's direct-claim path, in
//     backend/valkey): 32 partitions per round in one pipelined round
//     trip, starting at an offset derived from the worker instance id, so
//     idle workers spread their reads. Budget and quota admission at claim time are the
//     scheduler's job and are not applied here, as in FlowFabric's SDK;
//     a handler applies a quota itself with [Job.Admit] or [Admitting].
//   - A lane's executions outside flows live on one partition (one node of
//     a cluster) unless [Client.SetLaneSpread] spreads the lane over many:
//     producers then place each on one of the lane's partitions (the choice
//     is read from the lane's configuration hash, cached for
//     [LaneSpreadTTL]) and workers read those partitions round robin.
//   - Leases are renewed in the background at 2/3 of their TTL. A renewal
//     that finds the lease gone (stale, expired, revoked) cancels the
//     handler's context; the handler's later calls fail with the same code.
//   - Every type is safe for concurrent use unless its comment says
//     otherwise.
package sdk
