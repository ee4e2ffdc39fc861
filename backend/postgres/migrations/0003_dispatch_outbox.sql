-- fabric: cascade-dispatch claim column on the completion outbox
-- (NULL = not yet dispatched) and the index the dependency reconciler
-- scans.

ALTER TABLE ff_completion_event ADD COLUMN IF NOT EXISTS dispatched_at_ms bigint;
CREATE INDEX IF NOT EXISTS ff_completion_event_pending_dispatch_idx
    ON ff_completion_event (partition_key, committed_at_ms) WHERE dispatched_at_ms IS NULL;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (3, '0003_dispatch_outbox', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
