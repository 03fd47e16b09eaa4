-- Auto-renewable subscriptions: the state computed from Apple's latest answer, and when to ask again.
CREATE TABLE subscriptions (
    app_id                  uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    environment             text NOT NULL,
    original_transaction_id text NOT NULL,
    product_id              text NOT NULL,
    state                   text NOT NULL
        CHECK (state IN ('active', 'grace', 'billing_retry', 'expired', 'revoked', 'upgraded')),
    expires_at              timestamptz,
    purchased_at            timestamptz,
    original_purchase_date  timestamptz,
    auto_renew_status       boolean,
    auto_renew_product_id   text,
    is_in_billing_retry     boolean NOT NULL DEFAULT false,
    grace_period_expires_at timestamptz,
    expiration_intent       integer,
    is_trial                boolean NOT NULL DEFAULT false,
    is_intro                boolean NOT NULL DEFAULT false,
    ownership_type          text,
    latest_transaction_id   text NOT NULL,
    revoked_at              timestamptz,
    cancellation_reason     integer,
    user_identifier         text,
    -- The stored receipt whose latest receipt re-polls send (a reference, not a copy: the table stays
    -- small enough to scan its due index at any size).
    receipt_id              uuid NOT NULL REFERENCES receipts (id),
    -- When Apple gave the answer this row comes from: an older answer never replaces a newer one.
    observed_at             timestamptz NOT NULL,
    next_poll_at            timestamptz,
    -- Bumped each time the scheduler queues a re-poll: with the key, it names that job exactly once.
    poll_seq                bigint NOT NULL DEFAULT 0,
    last_polled_at          timestamptz,
    last_poll_error         text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, environment, original_transaction_id)
);
-- The scheduler's only read path: due rows, oldest first. Partial, so subscriptions that need no
-- more polling cost nothing in it.
CREATE INDEX subscriptions_due_idx ON subscriptions (next_poll_at) WHERE next_poll_at IS NOT NULL;
CREATE INDEX subscriptions_user_idx ON subscriptions (app_id, user_identifier) WHERE user_identifier IS NOT NULL;

-- The entitlement API lists a user's other purchases from the ledger: only purchases without an
-- expiry are indexed, so renewals (most of the ledger) cost no index write.
CREATE INDEX in_app_purchases_user_idx ON in_app_purchases (app_id, user_identifier)
    WHERE user_identifier IS NOT NULL AND expires_date IS NULL;

-- A re-poll's calls to Apple are filed under the receipt it re-sent, so the audit trail is keyed by
-- the job: a receipt polled many times has one set of attempts per job.
ALTER TABLE validation_attempts ADD COLUMN job_id uuid;
UPDATE validation_attempts SET job_id = receipt_id;
ALTER TABLE validation_attempts ALTER COLUMN job_id SET NOT NULL;
ALTER TABLE validation_attempts DROP CONSTRAINT validation_attempts_receipt_id_attempt_seq_key;
ALTER TABLE validation_attempts ADD CONSTRAINT validation_attempts_job_attempt_seq_key UNIQUE (job_id, attempt, seq);
CREATE INDEX validation_attempts_receipt_idx ON validation_attempts (receipt_id);
