-- fabric: wake idle workers at once. NOTIFY fabric_eligible, payload
-- "<partition_key>:<lane>", when an execution becomes runnable and eligible now: created
-- eligible, promoted after a delay or a retry backoff, unblocked by its
-- dependencies. A wake-up hint only (Postgres folds repeats in one
-- transaction): a worker that misses one finds the work at its next poll.
-- Not a FlowFabric object: Migrate creates it after FlowFabric's
-- migrations and records it in no ledger.
-- A transaction that set fabric.eligible_notify to 'off' (SET LOCAL) sends
-- none: fabric's client paces its creates' NOTIFYs itself and sends one
-- after such a create commits (backend/postgres/eligible_notes.go).
CREATE OR REPLACE FUNCTION fabric_notify_eligible() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('fabric.eligible_notify', true) = 'off' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('fabric_eligible', NEW.partition_key::text || ':' || NEW.lane_id);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER fabric_exec_core_eligible_notify_trg
    AFTER INSERT OR UPDATE OF lifecycle_phase, eligibility_state ON ff_exec_core
    FOR EACH ROW
    WHEN (NEW.lifecycle_phase = 'runnable' AND NEW.eligibility_state = 'eligible_now')
    EXECUTE FUNCTION fabric_notify_eligible();
