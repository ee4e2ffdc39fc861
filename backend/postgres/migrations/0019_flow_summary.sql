-- no-transaction
-- fabric: derived per-flow rollup of member states (dashboard-facing; the
-- authoritative flow state stays in ff_flow_core).

CREATE TABLE IF NOT EXISTS ff_flow_summary (
    partition_key            smallint NOT NULL,
    flow_id                  uuid     NOT NULL,
    total_members            bigint   NOT NULL DEFAULT 0,
    sampled_members          integer  NOT NULL DEFAULT 0,
    members_completed        integer  NOT NULL DEFAULT 0,
    members_failed           integer  NOT NULL DEFAULT 0,
    members_cancelled        integer  NOT NULL DEFAULT 0,
    members_expired          integer  NOT NULL DEFAULT 0,
    members_skipped          integer  NOT NULL DEFAULT 0,
    members_active           integer  NOT NULL DEFAULT 0,
    members_suspended        integer  NOT NULL DEFAULT 0,
    members_waiting          integer  NOT NULL DEFAULT 0,
    members_delayed          integer  NOT NULL DEFAULT 0,
    members_rate_limited     integer  NOT NULL DEFAULT 0,
    members_waiting_children integer  NOT NULL DEFAULT 0,
    public_flow_state        text     NOT NULL,
    last_summary_update_at   bigint   NOT NULL,
    PRIMARY KEY (partition_key, flow_id)
) PARTITION BY HASH (partition_key);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_flow_summary FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_flow_summary_p' || i, i); END LOOP; END $$;
COMMIT;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (19, '0019_flow_summary', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
