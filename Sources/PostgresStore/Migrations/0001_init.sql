-- Apps, their API tokens, receipts, the transaction ledger and the audit trail of Apple calls.

CREATE TABLE apps (
    id                       uuid PRIMARY KEY,
    name                     text NOT NULL UNIQUE,
    bundle_id                text NOT NULL,
    shared_secret            text,
    exclude_old_transactions boolean NOT NULL DEFAULT false,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a token is stored: a database leak does not leak working tokens.
CREATE TABLE api_tokens (
    id           uuid PRIMARY KEY,
    app_id       uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    token_sha256 bytea NOT NULL UNIQUE,
    prefix       text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_app_idx ON api_tokens (app_id);

CREATE TABLE receipts (
    id                    uuid PRIMARY KEY,
    app_id                uuid NOT NULL REFERENCES apps (id),
    style                 text,
    bundle_id             text,
    environment           text,
    status                text NOT NULL CHECK (status IN ('pending', 'valid', 'invalid', 'fraud', 'failed')),
    apple_status          integer,
    is_fraud              boolean NOT NULL DEFAULT false,
    fraud_reason          text,
    user_identifier       text,
    identifier_for_vendor text,
    country_code          text,
    ip_address            text,
    metadata              jsonb,
    receipt_data          text NOT NULL,
    latest_receipt        text,
    transaction_ids       text[] NOT NULL DEFAULT '{}',
    error_code            text,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    validated_at          timestamptz
);
CREATE INDEX receipts_app_created_idx ON receipts (app_id, created_at DESC);
CREATE INDEX receipts_user_idx ON receipts (app_id, user_identifier) WHERE user_identifier IS NOT NULL;

-- The ledger: one row per Apple transaction. A second user presenting the same transaction is
-- flagged as a conflict, never merged into the first user's purchase.
CREATE TABLE in_app_purchases (
    id                       bigserial PRIMARY KEY,
    app_id                   uuid NOT NULL REFERENCES apps (id),
    receipt_id               uuid NOT NULL REFERENCES receipts (id),
    environment              text NOT NULL,
    transaction_id           text NOT NULL,
    original_transaction_id  text NOT NULL,
    product_id               text NOT NULL,
    quantity                 integer NOT NULL,
    purchase_date            timestamptz,
    original_purchase_date   timestamptz,
    expires_date             timestamptz,
    cancellation_date        timestamptz,
    web_order_line_item_id   text,
    is_trial_period          boolean NOT NULL DEFAULT false,
    is_in_intro_offer_period boolean NOT NULL DEFAULT false,
    user_identifier          text,
    conflict_user_identifier text,
    is_conflict              boolean NOT NULL DEFAULT false,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    UNIQUE (environment, transaction_id)
);
CREATE INDEX in_app_purchases_original_idx ON in_app_purchases (app_id, environment, original_transaction_id);

-- One row per call to Apple; (receipt_id, attempt, seq) makes a replayed job insert nothing twice.
CREATE TABLE validation_attempts (
    id           bigserial PRIMARY KEY,
    receipt_id   uuid NOT NULL REFERENCES receipts (id),
    attempt      integer NOT NULL,
    seq          integer NOT NULL,
    endpoint     text NOT NULL,
    http_status  integer,
    apple_status integer,
    is_retryable boolean,
    latency_ms   integer NOT NULL,
    error_code   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (receipt_id, attempt, seq)
);
