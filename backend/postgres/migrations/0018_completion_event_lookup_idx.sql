-- fabric: completion-event lookup by (partition, execution, occurred_at)
-- for cascade dispatch. (No annotation row, as upstream.)

CREATE INDEX IF NOT EXISTS ff_completion_event_lookup_idx
    ON ff_completion_event (partition_key, execution_id, occurred_at_ms);
