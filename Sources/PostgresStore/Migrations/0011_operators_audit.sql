-- Named dashboard accounts and the audit log of every action taken through the admin surfaces.

CREATE TABLE operators (
    -- Compared case-insensitively: "Alice" and "alice" are one account.
    username      text PRIMARY KEY CHECK (username = lower(username) AND length(username) BETWEEN 1 AND 64),
    role          text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    -- scrypt in the PHC string format ($scrypt$ln=…,r=…,p=…$salt$hash); never the password.
    password_hash text NOT NULL,
    -- Bumped by every reset and role change: a session cookie names the generation it was issued
    -- for, so the change ends every session of the account at once, on every API replica.
    generation    integer NOT NULL DEFAULT 1,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit_log (
    id               bigserial PRIMARY KEY,
    at               timestamptz NOT NULL DEFAULT now(),
    -- Who: an operator's username, the built-in admin's, or "cli:<login>" for the command line.
    actor            text NOT NULL,
    role             text,
    -- A bounded code: dead.retry, retries.delete, webhook.pause, operator.add, customer.lookup, …
    action           text NOT NULL,
    -- Where: dashboard, api or cli.
    source           text NOT NULL,
    -- What it acted on, in words an operator reads (ids, a filter); never a secret or a receipt.
    target           text,
    app_id           uuid,
    -- The customers it touched, for the customer view.
    user_identifiers text[] NOT NULL DEFAULT '{}',
    -- How many jobs an action on the queues moved (null: not a queue action, or not finished).
    job_count        integer,
    outcome          text NOT NULL DEFAULT 'started' CHECK (outcome IN ('started', 'done', 'failed'))
);

CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_users ON audit_log USING gin (user_identifiers);
