-- fabric: hand a flow member's completion to the dispatcher without a
-- query. NOTIFY fabric_completion, payload "<partition_key>:<event_id>",
-- for every ff_completion_event row with a flow (delivered at commit),
-- beside FlowFabric's own ff_completion NOTIFY (payload the event id,
-- unchanged): postgres.Client.CompletionWakeups hands the partition to the
-- host straight from the payload. A wake-up hint only: a listener that
-- misses one catches up from the table after it reconnects, and the
-- dependency reconciler's own sweep is the safety net. Not a FlowFabric
-- object: Migrate creates it after FlowFabric's migrations and records it
-- in no ledger.
CREATE OR REPLACE FUNCTION fabric_notify_completion() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('fabric_completion', NEW.partition_key::text || ':' || NEW.event_id::text);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER fabric_completion_event_notify_trg
    AFTER INSERT ON ff_completion_event
    FOR EACH ROW
    WHEN (NEW.flow_id IS NOT NULL)
    EXECUTE FUNCTION fabric_notify_completion();
