-- no-transaction
-- fabric: quota policies, sliding admission window, admitted set.

CREATE TABLE IF NOT EXISTS ff_quota_policy (
    partition_key               smallint NOT NULL,
    quota_policy_id             text     NOT NULL,
    requests_per_window_seconds bigint   NOT NULL,
    max_requests_per_window     bigint   NOT NULL,
    active_concurrency_cap      bigint   NOT NULL,
    active_concurrency          bigint   NOT NULL DEFAULT 0,
    created_at_ms               bigint   NOT NULL,
    updated_at_ms               bigint   NOT NULL,
    PRIMARY KEY (partition_key, quota_policy_id)
) PARTITION BY HASH (partition_key);

CREATE TABLE IF NOT EXISTS ff_quota_window (
    partition_key   smallint NOT NULL,
    quota_policy_id text     NOT NULL,
    dimension       text     NOT NULL DEFAULT '',
    admitted_at_ms  bigint   NOT NULL,
    execution_id    text     NOT NULL,
    PRIMARY KEY (partition_key, quota_policy_id, dimension, admitted_at_ms, execution_id)
) PARTITION BY HASH (partition_key);

CREATE TABLE IF NOT EXISTS ff_quota_admitted (
    partition_key   smallint NOT NULL,
    quota_policy_id text     NOT NULL,
    execution_id    text     NOT NULL,
    admitted_at_ms  bigint   NOT NULL,
    expires_at_ms   bigint   NOT NULL,
    PRIMARY KEY (partition_key, quota_policy_id, execution_id)
) PARTITION BY HASH (partition_key);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_quota_policy FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_quota_policy_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_quota_window FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_quota_window_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_quota_admitted FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_quota_admitted_p' || i, i); END LOOP; END $$;
COMMIT;

CREATE INDEX IF NOT EXISTS ff_quota_admitted_expires_idx ON ff_quota_admitted (partition_key, expires_at_ms);

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (12, '0012_quota_policy', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
