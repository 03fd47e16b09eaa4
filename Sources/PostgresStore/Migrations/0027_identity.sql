-- Identity (issue 43, item 5): who a purchase belongs to when Apple reports it alone, what happens
-- when a second user presents a transaction, and user ids merged into one customer.

-- The per-app transfer rule. A constant default: no table rewrite (and the apps table is small).
ALTER TABLE apps ADD COLUMN transfer_rule text NOT NULL DEFAULT 'keep_first'
    CHECK (transfer_rule IN ('keep_first', 'transfer_to_latest', 'share'));

-- The app account token Apple signed into a transaction: a purchase stored without a user (seen
-- only through a notification or an import) is attached by it when its mapping is registered. A
-- nullable column without a default is metadata only; the partial index holds only tokened rows.
ALTER TABLE in_app_purchases ADD COLUMN app_account_token uuid;
CREATE INDEX in_app_purchases_token_idx ON in_app_purchases (app_id, app_account_token)
    WHERE app_account_token IS NOT NULL;

-- Token → the customer it was issued for (the canonical user id: aliases are resolved when written).
CREATE TABLE app_account_tokens (
    app_id            uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    app_account_token uuid NOT NULL,
    user_identifier   text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, app_account_token)
);

-- Alias → canonical user id, one hop: a chain is flattened when it would form (the alias's own
-- aliases are pointed at the new canonical id), so a look-up is one probe. A canonical id is never
-- an alias itself, which the writer keeps true in the same transaction.
CREATE TABLE user_aliases (
    app_id          uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    alias           text NOT NULL,
    user_identifier text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, alias),
    CHECK (alias <> user_identifier)
);
CREATE INDEX user_aliases_user_idx ON user_aliases (app_id, user_identifier);

-- Under the `share` rule: the users besides the owner a transaction entitles.
CREATE TABLE purchase_shares (
    app_id          uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    environment     text NOT NULL,
    transaction_id  text NOT NULL,
    user_identifier text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment, transaction_id, user_identifier)
);
CREATE INDEX purchase_shares_user_idx ON purchase_shares (app_id, user_identifier);
