-- no-transaction
-- fabric: budget tables (policy, usage, usage idempotency cache).

CREATE TABLE IF NOT EXISTS ff_budget_policy (
    partition_key smallint NOT NULL,
    budget_id     text     NOT NULL,
    policy_json   jsonb    NOT NULL,
    created_at_ms bigint   NOT NULL,
    updated_at_ms bigint   NOT NULL,
    PRIMARY KEY (partition_key, budget_id)
) PARTITION BY HASH (partition_key);

CREATE TABLE IF NOT EXISTS ff_budget_usage (
    partition_key    smallint NOT NULL,
    budget_id        text     NOT NULL,
    dimensions_key   text     NOT NULL,
    current_value    bigint   NOT NULL DEFAULT 0,
    last_reset_at_ms bigint,
    updated_at_ms    bigint   NOT NULL,
    PRIMARY KEY (partition_key, budget_id, dimensions_key)
) PARTITION BY HASH (partition_key);

CREATE TABLE IF NOT EXISTS ff_budget_usage_dedup (
    partition_key smallint NOT NULL,
    dedup_key     text     NOT NULL,
    outcome_json  jsonb    NOT NULL,
    applied_at_ms bigint   NOT NULL,
    expires_at_ms bigint   NOT NULL,
    PRIMARY KEY (partition_key, dedup_key)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_budget_usage_dedup_expires_idx ON ff_budget_usage_dedup (partition_key, expires_at_ms);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_budget_policy FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_budget_policy_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_budget_usage FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_budget_usage_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_budget_usage_dedup FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_budget_usage_dedup_p' || i, i); END LOOP; END $$;
COMMIT;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (2, '0002_budget', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
