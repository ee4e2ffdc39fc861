-- no-transaction
-- fabric: genesis schema shared with FlowFabric's Postgres backend.
--
-- Chunks between COMMIT; lines run in their own transactions: one
-- transaction per parent's 256 hash partitions keeps each under the
-- lock-table budget of a stock server. Every statement is idempotent
-- (IF NOT EXISTS / ON CONFLICT), so re-running a half-applied file
-- completes it.

-- Global tables.
CREATE TABLE IF NOT EXISTS ff_waitpoint_hmac (
    kid           text    NOT NULL PRIMARY KEY,
    secret        bytea   NOT NULL,
    rotated_at_ms bigint  NOT NULL,
    active        boolean NOT NULL DEFAULT true
);

CREATE TABLE IF NOT EXISTS ff_lane_registry (
    lane_id          text   NOT NULL PRIMARY KEY,
    registered_at_ms bigint NOT NULL,
    registered_by    text   NOT NULL
);

CREATE TABLE IF NOT EXISTS ff_partition_config (
    singleton_lock        boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (singleton_lock = true),
    num_flow_partitions   integer NOT NULL,
    num_budget_partitions integer NOT NULL,
    num_quota_partitions  integer NOT NULL,
    ff_version            text    NOT NULL
);

CREATE TABLE IF NOT EXISTS ff_migration_annotation (
    version             integer NOT NULL PRIMARY KEY,
    name                text    NOT NULL,
    applied_at_ms       bigint  NOT NULL,
    backward_compatible boolean NOT NULL
);

-- Executions: one row per execution; fields without a column live in
-- raw_fields.
CREATE TABLE IF NOT EXISTS ff_exec_core (
    partition_key         smallint NOT NULL,
    execution_id          uuid     NOT NULL,
    flow_id               uuid,
    lane_id               text     NOT NULL,
    required_capabilities text[]   NOT NULL DEFAULT '{}',
    attempt_index         integer  NOT NULL DEFAULT 0,
    lifecycle_phase       text     NOT NULL,
    ownership_state       text     NOT NULL,
    eligibility_state     text     NOT NULL,
    public_state          text     NOT NULL,
    attempt_state         text     NOT NULL,
    blocking_reason       text,
    cancellation_reason   text,
    cancelled_by          text,
    priority              integer  NOT NULL DEFAULT 0,
    created_at_ms         bigint   NOT NULL,
    terminal_at_ms        bigint,
    deadline_at_ms        bigint,
    payload               bytea,
    result                bytea,
    policy                jsonb,
    raw_fields            jsonb    NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (partition_key, execution_id)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_exec_core_lane_phase_idx ON ff_exec_core (partition_key, lane_id, lifecycle_phase);
CREATE INDEX IF NOT EXISTS ff_exec_core_caps_gin_idx ON ff_exec_core USING GIN (required_capabilities);
CREATE INDEX IF NOT EXISTS ff_exec_core_flow_idx ON ff_exec_core (partition_key, flow_id) WHERE flow_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS ff_exec_core_deadline_idx ON ff_exec_core (partition_key, deadline_at_ms) WHERE deadline_at_ms IS NOT NULL;

CREATE TABLE IF NOT EXISTS ff_flow_core (
    partition_key     smallint NOT NULL,
    flow_id           uuid     NOT NULL,
    graph_revision    bigint   NOT NULL DEFAULT 0,
    public_flow_state text     NOT NULL,
    created_at_ms     bigint   NOT NULL,
    terminal_at_ms    bigint,
    raw_fields        jsonb    NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (partition_key, flow_id)
) PARTITION BY HASH (partition_key);

-- Attempts: lease and worker state per (execution, attempt index).
CREATE TABLE IF NOT EXISTS ff_attempt (
    partition_key       smallint NOT NULL,
    execution_id        uuid     NOT NULL,
    attempt_index       integer  NOT NULL,
    worker_id           text,
    worker_instance_id  text,
    lease_epoch         bigint   NOT NULL DEFAULT 0,
    lease_expires_at_ms bigint,
    started_at_ms       bigint,
    terminal_at_ms      bigint,
    outcome             text,
    usage               jsonb,
    policy              jsonb,
    raw_fields          jsonb    NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (partition_key, execution_id, attempt_index)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_attempt_lease_expiry_idx ON ff_attempt (partition_key, lease_expires_at_ms) WHERE lease_expires_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS ff_attempt_worker_idx ON ff_attempt (partition_key, worker_id) WHERE worker_id IS NOT NULL;

-- Flow graph.
CREATE TABLE IF NOT EXISTS ff_edge (
    partition_key  smallint NOT NULL,
    flow_id        uuid     NOT NULL,
    edge_id        uuid     NOT NULL,
    upstream_eid   uuid     NOT NULL,
    downstream_eid uuid     NOT NULL,
    policy         jsonb    NOT NULL,
    policy_version integer  NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_key, flow_id, edge_id)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_edge_downstream_idx ON ff_edge (partition_key, flow_id, downstream_eid) INCLUDE (upstream_eid, policy_version);
CREATE INDEX IF NOT EXISTS ff_edge_upstream_idx ON ff_edge (partition_key, flow_id, upstream_eid);

CREATE TABLE IF NOT EXISTS ff_edge_group (
    partition_key                   smallint NOT NULL,
    flow_id                         uuid     NOT NULL,
    downstream_eid                  uuid     NOT NULL,
    policy                          jsonb    NOT NULL,
    k_target                        integer  NOT NULL DEFAULT 0,
    success_count                   integer  NOT NULL DEFAULT 0,
    fail_count                      integer  NOT NULL DEFAULT 0,
    skip_count                      integer  NOT NULL DEFAULT 0,
    running_count                   integer  NOT NULL DEFAULT 0,
    cancel_siblings_pending_flag    boolean  NOT NULL DEFAULT false,
    cancel_siblings_pending_members text[]   NOT NULL DEFAULT '{}',
    PRIMARY KEY (partition_key, flow_id, downstream_eid)
) PARTITION BY HASH (partition_key);

CREATE TABLE IF NOT EXISTS ff_pending_cancel_groups (
    partition_key  smallint NOT NULL,
    flow_id        uuid     NOT NULL,
    downstream_eid uuid     NOT NULL,
    enqueued_at_ms bigint   NOT NULL,
    PRIMARY KEY (partition_key, flow_id, downstream_eid)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_pending_cancel_groups_enqueued_idx ON ff_pending_cancel_groups (partition_key, enqueued_at_ms);

CREATE TABLE IF NOT EXISTS ff_cancel_dispatch_outbox (
    partition_key  smallint NOT NULL,
    flow_id        uuid     NOT NULL,
    downstream_eid uuid     NOT NULL,
    target_exec_id uuid     NOT NULL,
    reason         text     NOT NULL,
    enqueued_at_ms bigint   NOT NULL,
    PRIMARY KEY (partition_key, flow_id, downstream_eid, target_exec_id)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_cancel_dispatch_outbox_enqueued_idx ON ff_cancel_dispatch_outbox (partition_key, enqueued_at_ms);

-- Suspensions and waitpoints.
CREATE TABLE IF NOT EXISTS ff_suspension_current (
    partition_key   smallint NOT NULL,
    execution_id    uuid     NOT NULL,
    suspension_id   uuid     NOT NULL,
    suspended_at_ms bigint   NOT NULL,
    timeout_at_ms   bigint,
    reason_code     text,
    condition       jsonb    NOT NULL,
    satisfied_set   jsonb    NOT NULL DEFAULT '[]'::jsonb,
    member_map      jsonb    NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (partition_key, execution_id)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_suspension_current_suspended_at_idx ON ff_suspension_current (partition_key, suspended_at_ms);
CREATE INDEX IF NOT EXISTS ff_suspension_current_timeout_idx ON ff_suspension_current (partition_key, timeout_at_ms) WHERE timeout_at_ms IS NOT NULL;

CREATE TABLE IF NOT EXISTS ff_waitpoint_pending (
    partition_key smallint NOT NULL,
    waitpoint_id  uuid     NOT NULL,
    execution_id  uuid     NOT NULL,
    token_kid     text     NOT NULL,
    token         text     NOT NULL,
    created_at_ms bigint   NOT NULL,
    expires_at_ms bigint,
    condition     jsonb,
    PRIMARY KEY (partition_key, waitpoint_id)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_waitpoint_pending_expires_idx ON ff_waitpoint_pending (partition_key, expires_at_ms) WHERE expires_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS ff_waitpoint_pending_exec_idx ON ff_waitpoint_pending (partition_key, execution_id);

-- Streams.
CREATE TABLE IF NOT EXISTS ff_stream_frame (
    partition_key smallint NOT NULL,
    execution_id  uuid     NOT NULL,
    attempt_index integer  NOT NULL,
    ts_ms         bigint   NOT NULL,
    seq           integer  NOT NULL,
    fields        jsonb    NOT NULL,
    mode          text     NOT NULL,
    created_at_ms bigint   NOT NULL,
    PRIMARY KEY (partition_key, execution_id, attempt_index, ts_ms, seq)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_stream_frame_ts_seq_idx ON ff_stream_frame (partition_key, execution_id, attempt_index, ts_ms, seq);

CREATE TABLE IF NOT EXISTS ff_stream_summary (
    partition_key    smallint NOT NULL,
    execution_id     uuid     NOT NULL,
    attempt_index    integer  NOT NULL,
    document_json    jsonb    NOT NULL,
    version          integer  NOT NULL DEFAULT 0,
    patch_kind       text,
    last_updated_ms  bigint   NOT NULL,
    first_applied_ms bigint   NOT NULL,
    PRIMARY KEY (partition_key, execution_id, attempt_index)
) PARTITION BY HASH (partition_key);

CREATE TABLE IF NOT EXISTS ff_stream_meta (
    partition_key       smallint         NOT NULL,
    execution_id        uuid             NOT NULL,
    attempt_index       integer          NOT NULL,
    ema_rate_hz         double precision NOT NULL DEFAULT 0,
    last_append_ts_ms   bigint           NOT NULL DEFAULT 0,
    maxlen_applied_last integer          NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_key, execution_id, attempt_index)
) PARTITION BY HASH (partition_key);

-- Completion outbox: the durable log; NOTIFY ff_completion (payload
-- event_id) is only a wake-up. One identity sequence on the parent orders
-- events across partitions.
CREATE TABLE IF NOT EXISTS ff_completion_event (
    partition_key   smallint NOT NULL,
    event_id        bigint   GENERATED ALWAYS AS IDENTITY,
    execution_id    uuid     NOT NULL,
    flow_id         uuid,
    outcome         text     NOT NULL,
    namespace       text,
    instance_tag    text,
    occurred_at_ms  bigint   NOT NULL,
    committed_at_ms bigint   NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    PRIMARY KEY (partition_key, event_id)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_completion_event_event_id_idx ON ff_completion_event (event_id);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_exec_core FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_exec_core_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_flow_core FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_flow_core_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_attempt FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_attempt_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_edge FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_edge_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_edge_group FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_edge_group_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_pending_cancel_groups FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_pending_cancel_groups_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_cancel_dispatch_outbox FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_cancel_dispatch_outbox_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_suspension_current FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_suspension_current_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_waitpoint_pending FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_waitpoint_pending_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_stream_frame FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_stream_frame_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_stream_summary FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_stream_summary_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_stream_meta FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_stream_meta_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_completion_event FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_completion_event_p' || i, i); END LOOP; END $$;
COMMIT;

-- Wake-up triggers (NOTIFY is delivered at commit).
CREATE OR REPLACE FUNCTION ff_notify_completion_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_completion', NEW.event_id::text);
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER ff_completion_event_notify_trg
    AFTER INSERT ON ff_completion_event
    FOR EACH ROW EXECUTE FUNCTION ff_notify_completion_event();

-- Per-stream channel ff_stream_<uuid>_<attempt>, payload "<ts_ms>-<seq>".
CREATE OR REPLACE FUNCTION ff_notify_stream_frame() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_stream_' || NEW.execution_id::text || '_' || NEW.attempt_index::text,
                      NEW.ts_ms::text || '-' || NEW.seq::text);
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER ff_stream_frame_notify_trg
    AFTER INSERT ON ff_stream_frame
    FOR EACH ROW EXECUTE FUNCTION ff_notify_stream_frame();

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (1, '0001_initial', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, false)
ON CONFLICT (version) DO NOTHING;

-- Seed read by nobody at runtime; kept for schema parity.
INSERT INTO ff_partition_config (singleton_lock, num_flow_partitions, num_budget_partitions, num_quota_partitions, ff_version)
VALUES (true, 256, 256, 256, '0.7.0')
ON CONFLICT (singleton_lock) DO NOTHING;
