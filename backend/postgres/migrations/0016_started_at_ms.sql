-- fabric: set-once first-claim time on the execution, backfilled from
-- the earliest started attempt.

ALTER TABLE ff_exec_core ADD COLUMN IF NOT EXISTS started_at_ms bigint;

UPDATE ff_exec_core c
   SET started_at_ms = first.started_at_ms
  FROM (SELECT DISTINCT ON (partition_key, execution_id) partition_key, execution_id, started_at_ms
          FROM ff_attempt
         WHERE started_at_ms IS NOT NULL
         ORDER BY partition_key, execution_id, attempt_index ASC) first
 WHERE c.partition_key = first.partition_key
   AND c.execution_id = first.execution_id
   AND c.started_at_ms IS NULL;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (16, '0016_started_at_ms', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
