-- Each user's app transaction (issue 42 item 6): the device's signed AppTransaction, verified at
-- the door, kept per app, environment and user so a paid-to-free migration can read the version
-- and date the customer first bought or downloaded the app. A newer signed one replaces an older.
CREATE TABLE app_transactions (
    app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    environment text NOT NULL CHECK (environment IN ('production', 'sandbox')),
    user_identifier text NOT NULL,
    app_transaction_id text,
    bundle_id text NOT NULL,
    app_apple_id bigint,
    application_version text,
    original_application_version text NOT NULL,
    original_purchase_date timestamptz NOT NULL,
    receipt_creation_date timestamptz,
    preorder_date timestamptz,
    original_platform text,
    signed_at timestamptz NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb NOT NULL,
    PRIMARY KEY (app_id, environment, user_identifier)
);

-- RESCIND_CONSENT names the app transaction, not the user: found through this.
CREATE INDEX app_transactions_by_id ON app_transactions (app_id, environment, app_transaction_id)
    WHERE app_transaction_id IS NOT NULL;
