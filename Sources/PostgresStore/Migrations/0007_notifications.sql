-- App Store Server Notifications (V2 and V1), applied to the same ledger and subscriptions as
-- every validation.

-- The secret half of each app's notification URL (/apple/notifications/{app}/{token}): only its
-- SHA-256 is kept, like API tokens, so a database dump does not reveal the URL.
ALTER TABLE apps ADD COLUMN notification_token_sha256 bytea;

-- A receipts row may hold what a notification brought for a purchase no stored receipt knew: the
-- V2 signed transaction, or the V1 latest receipt.
ALTER TABLE receipts DROP CONSTRAINT receipts_source_check;
ALTER TABLE receipts ADD CONSTRAINT receipts_source_check
    CHECK (source IN ('receipt', 'signed_transaction', 'transaction_id', 'notification'));

-- The refund's reason (1: an issue with the app; 0: another), and the signed date of the newest
-- notification applied to the row: an older one arriving late does not undo a refund.
ALTER TABLE in_app_purchases
    ADD COLUMN cancellation_reason integer,
    ADD COLUMN signed_at timestamptz;

-- One audit row per notification, whatever Apple retried: the unique key is the dedupe.
CREATE TABLE notifications (
    id                      uuid PRIMARY KEY,
    app_id                  uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    notification_uuid       text NOT NULL,
    version                 text NOT NULL CHECK (version IN ('v1', 'v2')),
    notification_type       text NOT NULL,
    subtype                 text,
    environment             text,
    signed_at               timestamptz NOT NULL,
    original_transaction_id text,
    transaction_id          text,
    product_id              text,
    -- Deferred: the notification's own receipts row is written after its audit row.
    receipt_id              uuid REFERENCES receipts (id) DEFERRABLE INITIALLY DEFERRED,
    outcome                 text NOT NULL CHECK (outcome IN ('applied', 'stale', 'recorded')),
    -- As operators see it: nested JWS decoded, receipt data truncated.
    payload                 jsonb NOT NULL,
    origin                  text NOT NULL,
    received_at             timestamptz NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (app_id, notification_uuid)
);
CREATE INDEX notifications_app_created_idx ON notifications (app_id, created_at DESC);
CREATE INDEX notifications_created_idx ON notifications (created_at DESC);
CREATE INDEX notifications_type_idx ON notifications (notification_type, created_at DESC);
CREATE INDEX notifications_original_idx ON notifications (app_id, original_transaction_id)
    WHERE original_transaction_id IS NOT NULL;
