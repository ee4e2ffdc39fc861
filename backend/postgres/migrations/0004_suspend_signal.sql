-- fabric: suspend idempotency cache (not partitioned) and the
-- human-readable waitpoint key.

CREATE TABLE IF NOT EXISTS ff_suspend_dedup (
    partition_key   smallint NOT NULL,
    idempotency_key text     NOT NULL,
    outcome_json    jsonb    NOT NULL,
    created_at_ms   bigint   NOT NULL,
    PRIMARY KEY (partition_key, idempotency_key)
);

ALTER TABLE ff_waitpoint_pending ADD COLUMN IF NOT EXISTS waitpoint_key text NOT NULL DEFAULT '';

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (4, '0004_suspend_signal', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
