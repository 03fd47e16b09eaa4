-- Events (an outbox written in the transaction of each change) and webhook deliveries of them.

-- The next sequence number of each subject (a subscription, a purchase, a receipt): one row per
-- subject, whose row lock orders concurrent writers of the same subject.
CREATE TABLE event_subjects (
    app_id        uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    environment   text NOT NULL,
    subject       text NOT NULL,
    last_sequence bigint NOT NULL,
    PRIMARY KEY (app_id, environment, subject)
);

CREATE TABLE events (
    id                      uuid PRIMARY KEY,
    app_id                  uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    type                    text NOT NULL,
    environment             text,
    user_identifier         text,
    subject                 text NOT NULL,
    original_transaction_id text,
    transaction_id          text,
    receipt_id              uuid,
    sequence                bigint NOT NULL,
    occurred_at             timestamptz NOT NULL,
    recorded_at             timestamptz NOT NULL DEFAULT now(),
    data                    jsonb NOT NULL,
    -- The writing transaction: the events API lists events in (txid, id) order and only those of
    -- transactions older than every one still running, so a page never skips an event that
    -- commits later with a smaller id.
    txid                    xid8 NOT NULL DEFAULT pg_current_xact_id(),
    dedupe_key              text UNIQUE
);
CREATE INDEX events_app_order_idx ON events (app_id, txid, id);
CREATE INDEX events_user_idx ON events (app_id, user_identifier, txid, id) WHERE user_identifier IS NOT NULL;
CREATE INDEX events_subject_idx ON events (app_id, subject, sequence);

CREATE TABLE webhook_endpoints (
    id                 uuid PRIMARY KEY,
    app_id             uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    url                text NOT NULL,
    -- Event types or families (`subscription.*`); empty: every event.
    event_types        text[] NOT NULL DEFAULT '{}',
    -- Sealed with RECEIPTQ_SECRETS_KEY like the In-App Purchase keys; the previous secret stays
    -- valid (and signs too) until previous_expires_at, so a rotation loses no delivery.
    secret_sealed      bytea NOT NULL,
    previous_sealed    bytea,
    previous_expires_at timestamptz,
    -- Loopback, private and link-local addresses are refused unless an admin allowed them here.
    allow_private      boolean NOT NULL DEFAULT false,
    description        text,
    failing_since      timestamptz,
    paused_at          timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_app_idx ON webhook_endpoints (app_id);

-- One row per event and endpoint, created with the event. `pending` until the dispatcher queues it
-- (only once every earlier delivery of its ordering key to the endpoint is settled), `queued` while
-- the workers attempt it, then `delivered` or `dead`.
CREATE TABLE webhook_deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id      uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id         uuid NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    app_id           uuid NOT NULL,
    ordering_key     text NOT NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'queued', 'delivered', 'dead')),
    attempts         integer NOT NULL DEFAULT 0,
    last_http_status integer,
    last_error       text,
    last_attempt_at  timestamptz,
    delivered_at     timestamptz,
    queued_at        timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, event_id)
);
-- The dispatcher's two look-ups stay on the small set of unsettled rows, whatever the history.
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_open_idx ON webhook_deliveries (endpoint_id, ordering_key, id)
    WHERE status IN ('pending', 'queued');
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_id);
