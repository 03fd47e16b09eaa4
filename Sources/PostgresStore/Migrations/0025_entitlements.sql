-- Named entitlements (issue 43): each app's catalogue of what it unlocks and the products that
-- grant it, and operators' grants of an entitlement to one user, until a date or for good.

CREATE TABLE entitlement_definitions (
    app_id      uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    entitlement text NOT NULL,
    products    text[] NOT NULL CHECK (cardinality(products) BETWEEN 1 AND 100),
    description text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, entitlement)
);

CREATE TABLE entitlement_grants (
    id              uuid PRIMARY KEY,
    app_id          uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    user_identifier text NOT NULL,
    entitlement     text NOT NULL,
    granted_at      timestamptz NOT NULL,
    expires_at      timestamptz,
    granted_by      text NOT NULL,
    reason          text,
    revoked_at      timestamptz,
    revoked_by      text
);

CREATE INDEX entitlement_grants_user_idx ON entitlement_grants (app_id, user_identifier);
