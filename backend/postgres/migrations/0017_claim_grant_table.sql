-- no-transaction
-- fabric: claim/reclaim grants as rows (grant_id = sha256 of the grant
-- key), the reclaim counter, and a backfill of grants stashed in
-- ff_exec_core.raw_fields.claim_grant.

CREATE EXTENSION IF NOT EXISTS pgcrypto;

CREATE TABLE IF NOT EXISTS ff_claim_grant (
    partition_key       smallint NOT NULL,
    grant_id            bytea    NOT NULL,
    execution_id        uuid     NOT NULL,
    kind                text     NOT NULL CHECK (kind IN ('claim', 'reclaim')),
    worker_id           text     NOT NULL,
    worker_instance_id  text     NOT NULL,
    lane_id             text,
    capability_hash     text,
    worker_capabilities jsonb    NOT NULL DEFAULT '[]'::jsonb,
    route_snapshot_json text,
    admission_summary   text,
    grant_ttl_ms        bigint   NOT NULL,
    issued_at_ms        bigint   NOT NULL,
    expires_at_ms       bigint   NOT NULL,
    PRIMARY KEY (partition_key, grant_id)
) PARTITION BY HASH (partition_key);
CREATE INDEX IF NOT EXISTS ff_claim_grant_execution_idx ON ff_claim_grant (partition_key, execution_id);
CREATE INDEX IF NOT EXISTS ff_claim_grant_expiry_idx ON ff_claim_grant (expires_at_ms);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_claim_grant FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_claim_grant_p' || i, i); END LOOP; END $$;
COMMIT;

ALTER TABLE ff_exec_core ADD COLUMN IF NOT EXISTS lease_reclaim_count integer NOT NULL DEFAULT 0;

INSERT INTO ff_claim_grant (partition_key, grant_id, execution_id, kind, worker_id, worker_instance_id,
                            lane_id, capability_hash, worker_capabilities, route_snapshot_json,
                            admission_summary, grant_ttl_ms, issued_at_ms, expires_at_ms)
SELECT c.partition_key,
       digest(g->>'grant_key', 'sha256'),
       c.execution_id,
       'claim',
       g->>'worker_id',
       g->>'worker_instance_id',
       NULL, NULL, '[]'::jsonb, NULL, NULL,
       0,
       COALESCE((g->>'issued_at_ms')::bigint, 0),
       COALESCE((g->>'expires_at_ms')::bigint, 0)
  FROM ff_exec_core c, LATERAL (SELECT c.raw_fields->'claim_grant' AS g) legacy
 WHERE g->>'grant_key' IS NOT NULL
   AND g->>'worker_id' IS NOT NULL
   AND g->>'worker_instance_id' IS NOT NULL
ON CONFLICT (partition_key, grant_id) DO NOTHING;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (17, '0017_claim_grant_table', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
