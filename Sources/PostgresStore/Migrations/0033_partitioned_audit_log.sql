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
SELECT receiptq_partition_by_week('audit_log', 'at', 'id', ARRAY[
    'ALTER TABLE audit_log ADD CONSTRAINT audit_log_outcome_check CHECK (outcome IN (''started'', ''done'', ''failed'', ''refused''))',
    'CREATE INDEX audit_log_at_key ON audit_log (at DESC, id DESC)',
    'CREATE INDEX audit_log_users_key ON audit_log USING gin (user_identifiers)']);
