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
