-- fabric: signal delivery outbox with a NOTIFY ff_signal_event wake-up.

CREATE TABLE IF NOT EXISTS ff_signal_event (
    event_id        bigserial PRIMARY KEY,
    execution_id    text   NOT NULL,
    signal_id       text   NOT NULL,
    waitpoint_id    text,
    source_identity text,
    delivered_at_ms bigint NOT NULL,
    partition_key   int    NOT NULL
);
CREATE INDEX IF NOT EXISTS ff_signal_event_partition_key_idx ON ff_signal_event (partition_key, event_id);

CREATE OR REPLACE FUNCTION ff_notify_signal_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_signal_event', NEW.event_id::text);
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER ff_signal_event_notify_trg
    AFTER INSERT ON ff_signal_event
    FOR EACH ROW EXECUTE FUNCTION ff_notify_signal_event();

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (7, '0007_signal_event_outbox', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
