-- no-transaction
-- fabric: per-execution budget spend ledger (record_spend /
-- release_budget).

CREATE TABLE IF NOT EXISTS ff_budget_usage_by_exec (
    partition_key  smallint NOT NULL,
    budget_id      text     NOT NULL,
    execution_id   uuid     NOT NULL,
    dimensions_key text     NOT NULL,
    delta_total    bigint   NOT NULL DEFAULT 0,
    updated_at_ms  bigint   NOT NULL,
    PRIMARY KEY (partition_key, budget_id, execution_id, dimensions_key)
) PARTITION BY HASH (partition_key);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_budget_usage_by_exec FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_budget_usage_by_exec_p' || i, i); END LOOP; END $$;
COMMIT;

CREATE INDEX IF NOT EXISTS ff_budget_usage_by_exec_release_idx
    ON ff_budget_usage_by_exec (partition_key, budget_id, execution_id);

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (20, '0020_budget_usage_by_exec', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
