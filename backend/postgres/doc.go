// Package postgres is fabric's Postgres backend: the schema FlowFabric's
// ff-backend-postgres uses (same tables, columns, indexes and 256-way hash
// partitioning, applied by Migrate), typed operations for the worker path
// (CreateExecution, ClaimExecution/ClaimForWorker, CompleteExecution,
// FailExecution, RenewLease, DelayExecution) named as their backend/valkey
// counterparts, the operator's (CancelExecution, ChangePriority and
// ReplayExecution, the last two with their ff_operator_event rows;
// DeliverSignal), the reconcilers as plain functions (ReconcileAttemptTimeouts,
// PromoteDelayedDue, PromoteSubmitted), the worker registry
// (RegisterWorker, HeartbeatWorker, MarkWorkerDead, ListWorkers), the
// ff_completion_event outbox with a LISTEN subscriber, and a launcher for
// throwaway clusters (StartServer). Flow dependency resolution and sibling
// cancel run as plugins (pdk/pgflow). The migration ledger records
// upstream's sqlx checksums (UpstreamMigrations).
//
// # Notes
//
//   - Every operation runs in its own READ COMMITTED transaction with
//     explicit row locks, as upstream does; an error rolls the whole
//     transaction back.
//   - Timestamps are epoch milliseconds in *_ms bigint columns, taken from
//     the client's injected clock (ClientConfig.Now).
//   - The package reads ids from model: an execution id "{fp:N}:<uuid>"
//     is stored as partition_key N plus the bare uuid.
package postgres
