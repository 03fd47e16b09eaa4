-- The audit log partitioned by time, as `validation_attempts` (0032, whose functions this uses):
-- the old table becomes the legacy partition, no row copied. An audit row's time is `at`, set once
-- by Postgres when the action starts; its `outcome` is updated in place by id (the partitions each
-- index it), never its time, so a row never moves between partitions.
--
-- Not partitioned, and why (their retention stays batched deletes of bounded size):
-- `notifications` is deduplicated by Apple's notificationUUID, a unique key that would have to
-- include the time, and its `created_at` is the time of the write, not replay-stable; `events` and
-- `webhook_deliveries` are joined by foreign keys (a delivery references its event) and an event
-- is kept while one of its deliveries is open, which no time range of a partition can say.
DO $$
DECLARE
    bound timestamptz := receiptq_legacy_range('audit_log', 'at', 604800);
BEGIN
    ALTER TABLE audit_log RENAME TO audit_log_legacy;
    CREATE TABLE audit_log (LIKE audit_log_legacy INCLUDING DEFAULTS) PARTITION BY RANGE (at);
    ALTER SEQUENCE audit_log_id_seq OWNED BY audit_log.id;
    ALTER TABLE audit_log ADD CONSTRAINT audit_log_outcome_check CHECK (outcome IN ('started', 'done', 'failed', 'refused'));
    CREATE INDEX audit_log_at_key ON audit_log (at DESC, id DESC);
    CREATE INDEX audit_log_users_key ON audit_log USING gin (user_identifiers);
    EXECUTE format('ALTER TABLE audit_log ATTACH PARTITION audit_log_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    CREATE TABLE audit_log_default PARTITION OF audit_log DEFAULT;
    CREATE INDEX ON audit_log_default (id);
    PERFORM receiptq_create_partitions('audit_log', 'id', 'at', 604800, 2, now());
END
$$;
