-- fabric: suspension timeout behaviour (NULL reads as "fail").

ALTER TABLE ff_suspension_current ADD COLUMN IF NOT EXISTS timeout_behavior text;

INSERT INTO ff_migration_annotation (version, name, applied_at_ms, backward_compatible)
VALUES (5, '0005_timeout_scanners', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, true)
ON CONFLICT (version) DO NOTHING;
