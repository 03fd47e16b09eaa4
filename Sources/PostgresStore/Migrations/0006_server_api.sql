-- The App Store Server API and StoreKit 2 transactions, in the same tables as verifyReceipt's results.

-- How each app validates, what it does with sandbox purchases, and whether it checks the device.
ALTER TABLE apps
    ADD COLUMN validation_backend text NOT NULL DEFAULT 'auto'
        CHECK (validation_backend IN ('verify_receipt', 'server_api', 'auto')),
    -- Set once `auto` saw verifyReceipt gone (or past its sunset) and moved the app to the Server API.
    ADD COLUMN switched_to_server_api_at timestamptz,
    ADD COLUMN app_apple_id bigint,
    ADD COLUMN sandbox_policy text NOT NULL DEFAULT 'accept' CHECK (sandbox_policy IN ('accept', 'flag', 'reject')),
    ADD COLUMN device_check boolean NOT NULL DEFAULT true;

-- One In-App Purchase key per app. The private key is sealed (AES-256-GCM, bound to the app id)
-- with RECEIPTQ_SECRETS_KEY: a database dump alone does not reveal it.
CREATE TABLE app_server_api_keys (
    app_id     uuid PRIMARY KEY REFERENCES apps (id) ON DELETE CASCADE,
    issuer_id  text NOT NULL,
    key_id     text NOT NULL,
    sealed_key bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- What a receipts row was submitted as, and which backend validated it. For a StoreKit 2 signed
-- transaction `receipt_data` holds the JWS; for a bare transaction id it is empty.
ALTER TABLE receipts
    ADD COLUMN source text NOT NULL DEFAULT 'receipt' CHECK (source IN ('receipt', 'signed_transaction', 'transaction_id')),
    ADD COLUMN transaction_id text,
    ADD COLUMN validated_by text CHECK (validated_by IN ('verify_receipt', 'server_api'));
