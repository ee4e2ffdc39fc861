-- no-transaction
-- fabric: flow cancel backlog; a member row's presence means the member
-- is not yet acknowledged. execution_id holds the wire form {fp:N}:<uuid>.

CREATE TABLE IF NOT EXISTS ff_cancel_backlog (
    partition_key       smallint NOT NULL,
    flow_id             uuid     NOT NULL,
    requested_at_ms     bigint   NOT NULL,
    requester           text     NOT NULL DEFAULT '',
    reason              text     NOT NULL DEFAULT '',
    grace_until_ms      bigint,
    cancellation_policy text     NOT NULL,
    status              text     NOT NULL DEFAULT 'pending',
    PRIMARY KEY (partition_key, flow_id)
) PARTITION BY HASH (partition_key);

CREATE TABLE IF NOT EXISTS ff_cancel_backlog_member (
    partition_key smallint NOT NULL,
    flow_id       uuid     NOT NULL,
    execution_id  text     NOT NULL,
    PRIMARY KEY (partition_key, flow_id, execution_id)
) PARTITION BY HASH (partition_key);

COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_cancel_backlog FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_cancel_backlog_p' || i, i); END LOOP; END $$;
COMMIT;
DO $$ DECLARE i int; BEGIN FOR i IN 0..255 LOOP EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF ff_cancel_backlog_member FOR VALUES WITH (MODULUS 256, REMAINDER %s)', 'ff_cancel_backlog_member_p' || i, i); END LOOP; END $$;
COMMIT;

CREATE INDEX IF NOT EXISTS ff_cancel_backlog_grace_idx
    ON ff_cancel_backlog (partition_key, grace_until_ms) WHERE grace_until_ms IS NOT NULL;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (14, '0014_cancel_backlog', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
