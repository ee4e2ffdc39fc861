-- fabric: operator-control outbox with a NOTIFY ff_operator_event wake-up.

CREATE TABLE IF NOT EXISTS ff_operator_event (
    event_id       bigserial PRIMARY KEY,
    execution_id   text   NOT NULL,
    event_type     text   NOT NULL CHECK (event_type IN ('priority_changed', 'replayed', 'flow_cancel_requested')),
    details        jsonb,
    occurred_at_ms bigint NOT NULL,
    partition_key  int    NOT NULL,
    namespace      text,
    instance_tag   text
);
CREATE INDEX IF NOT EXISTS ff_operator_event_partition_key_idx ON ff_operator_event (partition_key, event_id);
CREATE INDEX IF NOT EXISTS ff_operator_event_namespace_idx ON ff_operator_event (partition_key, namespace) WHERE namespace IS NOT NULL;
CREATE INDEX IF NOT EXISTS ff_operator_event_instance_tag_idx ON ff_operator_event (partition_key, instance_tag) WHERE instance_tag IS NOT NULL;

CREATE OR REPLACE FUNCTION ff_notify_operator_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_operator_event', NEW.event_id::text);
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER ff_operator_event_notify_trg
    AFTER INSERT ON ff_operator_event
    FOR EACH ROW EXECUTE FUNCTION ff_notify_operator_event();

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (10, '0010_operator_event_outbox', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
