-- no-transaction
-- fabric: budget scope, breach counters and the reset schedule the
-- budget_reset reconciler scans.

ALTER TABLE ff_budget_policy
    ADD COLUMN IF NOT EXISTS scope_type        text   NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS scope_id          text   NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS enforcement_mode  text   NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS breach_count      bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS soft_breach_count bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_breach_at_ms bigint,
    ADD COLUMN IF NOT EXISTS last_breach_dim   text,
    ADD COLUMN IF NOT EXISTS next_reset_at_ms  bigint;

CREATE INDEX IF NOT EXISTS ff_budget_policy_reset_due_idx
    ON ff_budget_policy (partition_key, next_reset_at_ms) WHERE next_reset_at_ms IS NOT NULL;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (13, '0013_budget_policy_extensions', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
