-- Money and partial refunds on the ledger (issue 43): what each transaction cost as Apple signed
-- it, the offer it was bought under, and what a refund or revocation took back. Every column is
-- nullable and without a default, so adding them rewrites nothing and locks the table only for
-- the catalogue change; rows written before stay NULL (unknown), as verifyReceipt's do (no price).
-- Amounts are integers in milli-units of `currency` (9.99 USD is 9990), never floating point.

ALTER TABLE in_app_purchases
    ADD COLUMN IF NOT EXISTS price_milli bigint,
    ADD COLUMN IF NOT EXISTS currency text,
    ADD COLUMN IF NOT EXISTS storefront text,
    -- Apple's offerType: 1 introductory, 2 promotional, 3 offer code, 4 win-back.
    ADD COLUMN IF NOT EXISTS offer_type smallint,
    ADD COLUMN IF NOT EXISTS offer_identifier text,
    ADD COLUMN IF NOT EXISTS offer_discount_type text,
    -- ISO 8601 duration (P1M).
    ADD COLUMN IF NOT EXISTS offer_period text,
    ADD COLUMN IF NOT EXISTS billing_plan_type text,
    -- PURCHASED or FAMILY_SHARED.
    ADD COLUMN IF NOT EXISTS ownership_type text,
    -- REFUND_FULL, REFUND_PRORATED or FAMILY_REVOKE.
    ADD COLUMN IF NOT EXISTS revocation_type text,
    -- Milli-percent: 100000 is the whole transaction.
    ADD COLUMN IF NOT EXISTS revocation_percentage integer,
    ADD COLUMN IF NOT EXISTS refunded_quantity integer,
    ADD COLUMN IF NOT EXISTS refunded_milli bigint;

-- NOT VALID: checked for new writes only, so adding it scans nothing on a live ledger.
ALTER TABLE in_app_purchases
    ADD CONSTRAINT in_app_purchases_currency_iso4217 CHECK (currency ~ '^[A-Z]{3}$') NOT VALID,
    ADD CONSTRAINT in_app_purchases_revocation_percentage_range
        CHECK (revocation_percentage BETWEEN 0 AND 100000) NOT VALID;

-- A subscription's latest transaction's price, for the subscription resources and their events.
ALTER TABLE subscriptions
    ADD COLUMN IF NOT EXISTS price_milli bigint,
    ADD COLUMN IF NOT EXISTS currency text;
