-- fabric: subscriber-filter columns on ff_signal_event (namespace of the
-- execution; value of its cairn.instance_id tag).

ALTER TABLE ff_signal_event
    ADD COLUMN IF NOT EXISTS namespace    text,
    ADD COLUMN IF NOT EXISTS instance_tag text;
CREATE INDEX IF NOT EXISTS ff_signal_event_namespace_idx ON ff_signal_event (partition_key, namespace) WHERE namespace IS NOT NULL;
CREATE INDEX IF NOT EXISTS ff_signal_event_instance_tag_idx ON ff_signal_event (partition_key, instance_tag) WHERE instance_tag IS NOT NULL;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (9, '0009_signal_event_instance_tag', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
