-- fabric: the audit-event key gains event_kind so same-millisecond events
-- of different kinds no longer collide. (No annotation row, as upstream.)

ALTER TABLE ff_worker_registry_event DROP CONSTRAINT IF EXISTS ff_worker_registry_event_pkey;
ALTER TABLE ff_worker_registry_event
    ADD CONSTRAINT ff_worker_registry_event_pkey
    PRIMARY KEY (partition_key, namespace, worker_instance_id, event_at_ms, event_kind);
