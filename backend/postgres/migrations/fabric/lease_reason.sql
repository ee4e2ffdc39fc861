-- fabric's note of why a lease was released, one row per ff_lease_event
-- row that has one (emitLeaseEvent writes it in the event's transaction):
-- completed, failed_retry_scheduled, failed_terminal, cancelled,
-- worker_delay, suspend, waiting_children — the reasons FlowFabric's Lua
-- writes into a Valkey lease history. ff_lease_event is FlowFabric's
-- outbox and has no column for it. Not a FlowFabric table: Migrate
-- creates it after FlowFabric's migrations and records it in no ledger.
CREATE TABLE IF NOT EXISTS fabric_lease_reason (
    event_id bigint NOT NULL PRIMARY KEY,
    reason   text   NOT NULL
);
