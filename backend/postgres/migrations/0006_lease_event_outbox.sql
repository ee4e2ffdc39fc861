-- fabric: lease lifecycle outbox (acquired, renewed, expired, reclaimed,
-- revoked) with a NOTIFY ff_lease_event wake-up. Not partitioned;
-- execution_id is the bare uuid as text.

CREATE TABLE IF NOT EXISTS ff_lease_event (
    event_id       bigserial PRIMARY KEY,
    execution_id   text   NOT NULL,
    lease_id       text,
    event_type     text   NOT NULL,
    occurred_at_ms bigint NOT NULL,
    partition_key  int    NOT NULL
);
CREATE INDEX IF NOT EXISTS ff_lease_event_partition_key_idx ON ff_lease_event (partition_key, event_id);

CREATE OR REPLACE FUNCTION ff_notify_lease_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_lease_event', NEW.event_id::text);
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER ff_lease_event_notify_trg
    AFTER INSERT ON ff_lease_event
    FOR EACH ROW EXECUTE FUNCTION ff_notify_lease_event();

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (6, '0006_lease_event_outbox', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
