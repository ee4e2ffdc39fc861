-- no-transaction
-- fabric: worker registry (current state) and its audit events; children
-- are named with three-digit suffixes (_p000 .. _p255). Upstream applies
-- this file in one transaction; fabric commits per parent so it also fits
-- a stock lock table. (No annotation row, as upstream.)

CREATE TABLE IF NOT EXISTS ff_worker_registry (
    partition_key      smallint NOT NULL,
    namespace          text     NOT NULL,
    worker_instance_id text     NOT NULL,
    worker_id          text     NOT NULL,
    lanes              text[]   NOT NULL,
    capabilities_csv   text     NOT NULL,
    last_heartbeat_ms  bigint   NOT NULL,
    liveness_ttl_ms    bigint   NOT NULL,
    registered_at_ms   bigint   NOT NULL,
    PRIMARY KEY (partition_key, namespace, worker_instance_id)
) PARTITION BY HASH (partition_key);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_worker_registry FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_worker_registry_p' || lpad(i::text, 3, '0'), i); END LOOP; END $$;
COMMIT;

CREATE TABLE IF NOT EXISTS ff_worker_registry_event (
    partition_key      smallint NOT NULL,
    namespace          text     NOT NULL,
    worker_instance_id text     NOT NULL,
    event_kind         text     NOT NULL,
    event_at_ms        bigint   NOT NULL,
    reason             text     NULL,
    PRIMARY KEY (partition_key, namespace, worker_instance_id, event_at_ms)
) PARTITION BY HASH (partition_key);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_worker_registry_event FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_worker_registry_event_p' || lpad(i::text, 3, '0'), i); END LOOP; END $$;
COMMIT;

CREATE INDEX IF NOT EXISTS ff_worker_registry_ns_inst_idx ON ff_worker_registry (namespace, worker_instance_id);
