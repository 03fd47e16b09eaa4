-- Retention per kind of data (issue 44, item 1). The deployment's days per kind are settings
-- (RETENTION_<KIND>_DAYS); an app may keep its own here. 0 keeps forever. Purchases,
-- subscriptions and the ledger are no kind: retention never drops them.
CREATE TABLE app_retention (
    app_id     uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    kind       text NOT NULL CHECK (kind IN ('apple_call_attempts', 'notifications', 'events', 'webhook_deliveries',
                                             'audit_log')),
    days       integer NOT NULL CHECK (days BETWEEN 0 AND 36500),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, kind)
);

-- The retention step's scan starts from rows old enough to be due for some app: BRIN indexes on
-- the append-only tables' time (tiny, and quick to build: one pass over the table, no sort).
-- On a large live table, build them first by hand with CREATE INDEX CONCURRENTLY under the same
-- names: these statements then do nothing (ops/postgres/README.md, Retention).
CREATE INDEX IF NOT EXISTS validation_attempts_created_brin ON validation_attempts USING brin (created_at);
CREATE INDEX IF NOT EXISTS events_recorded_brin ON events USING brin (recorded_at);
CREATE INDEX IF NOT EXISTS webhook_deliveries_created_brin ON webhook_deliveries USING brin (created_at);
