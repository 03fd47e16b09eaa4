-- Refund defence (issue 43, item 3): each app's policy for answering Apple's CONSUMPTION_REQUEST,
-- what the app's backend posts about each user (consent, delivery, consumption, play time), and
-- the answers Apple took, one per request. Additive: a new column with a default, new tables.

-- The ledger's prices (milli-units of `currency`), as Apple's transactions state them; another
-- branch adds them in 0026 with the same names, hence IF NOT EXISTS.
ALTER TABLE in_app_purchases ADD COLUMN IF NOT EXISTS price_milli BIGINT, ADD COLUMN IF NOT EXISTS currency TEXT;

ALTER TABLE apps ADD COLUMN consumption_policy text NOT NULL DEFAULT 'off'
    CHECK (consumption_policy IN ('off', 'neutral', 'prefer_decline', 'prefer_grant'));

CREATE TABLE customer_consumption (
    app_id                  uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    user_identifier         text NOT NULL,
    consented               boolean NOT NULL,
    delivery_status         text CHECK (delivery_status IN ('DELIVERED', 'UNDELIVERED_QUALITY_ISSUE', 'UNDELIVERED_WRONG_ITEM',
                                                           'UNDELIVERED_SERVER_OUTAGE', 'UNDELIVERED_OTHER')),
    consumption_percentage  integer CHECK (consumption_percentage BETWEEN 0 AND 100000),
    sample_content_provided boolean NOT NULL DEFAULT false,
    play_time_seconds       bigint CHECK (play_time_seconds >= 0),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, user_identifier)
);

-- One row per request: claimed by the answer job that sends (two copies of one request, both
-- stored before either answered, send once), then filled when Apple took the answer.
CREATE TABLE consumption_answers (
    app_id          uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    notification_id text NOT NULL,
    transaction_id  text NOT NULL,
    claimed_by      uuid NOT NULL,
    claimed_at      timestamptz NOT NULL DEFAULT now(),
    environment     text,
    user_identifier text,
    policy          text,
    answer          jsonb,
    sent_at         timestamptz,
    PRIMARY KEY (app_id, notification_id)
);

CREATE INDEX consumption_answers_by_user_idx ON consumption_answers (app_id, user_identifier) WHERE user_identifier IS NOT NULL;
