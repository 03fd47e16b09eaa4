-- Issue 42, support endpoints: a mass renewal extension (every active subscriber of a product)
-- runs at Apple for hours; its request and Apple's last word on it are kept here, so operators
-- see it until it is complete, whoever asked and from wherever they look.

CREATE TABLE mass_extensions (
    app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    request_identifier uuid NOT NULL,
    environment text NOT NULL CHECK (environment IN ('production', 'sandbox')),
    product_id text NOT NULL,
    extend_by_days integer NOT NULL CHECK (extend_by_days BETWEEN 1 AND 90),
    extend_reason_code integer NOT NULL CHECK (extend_reason_code BETWEEN 0 AND 3),
    storefront_country_codes text[] NOT NULL DEFAULT '{}',
    requested_by text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    complete boolean NOT NULL DEFAULT false,
    completed_at timestamptz,
    succeeded_count integer,
    failed_count integer,
    checked_at timestamptz,
    PRIMARY KEY (app_id, request_identifier)
);

CREATE INDEX mass_extensions_by_app ON mass_extensions (app_id, requested_at DESC);
