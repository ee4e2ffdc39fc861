-- fabric's periodic schedules (sdk Client.AddPeriodic; fired by the
-- pg_periodic scanner plugin with model/pgsql's periodic.fire). Not a
-- FlowFabric table: Migrate creates it after FlowFabric's migrations and
-- records it in no ledger.
CREATE TABLE IF NOT EXISTS fabric_periodic (
    name                  text     NOT NULL PRIMARY KEY,
    -- The schedule's lane's solo partition: its ticks' executions live
    -- there, and the partition's scanner fires it.
    partition_key         smallint NOT NULL,
    lane_id               text     NOT NULL,
    kind                  text     NOT NULL,
    namespace             text     NOT NULL,
    payload               bytea,
    priority              integer  NOT NULL DEFAULT 0,
    policy                jsonb,
    required_capabilities text[]   NOT NULL DEFAULT '{}',
    tags                  jsonb    NOT NULL DEFAULT '{}'::jsonb,
    -- Exactly one of every_ms (a fixed interval from anchor_ms) and cron.
    every_ms              bigint,
    cron                  text     NOT NULL DEFAULT '',
    anchor_ms             bigint   NOT NULL,
    -- The next tick; NULL when a cron expression has none left.
    next_due_ms           bigint,
    last_tick_ms          bigint,
    last_execution_id     text,
    created_at_ms         bigint   NOT NULL,
    creator               text     NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS fabric_periodic_due_idx ON fabric_periodic (partition_key, next_due_ms);
