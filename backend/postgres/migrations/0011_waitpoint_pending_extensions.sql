-- fabric: pending-waitpoint listing columns.

ALTER TABLE ff_waitpoint_pending
    ADD COLUMN IF NOT EXISTS state                 text   NOT NULL DEFAULT 'pending',
    ADD COLUMN IF NOT EXISTS required_signal_names text[] NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS activated_at_ms       bigint;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (11, '0011_waitpoint_pending_extensions', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
