-- Revenue figures (issue 43, item 2): what the worker adds up per app, day (UTC) and currency in
-- the transaction that stores what changed: money in milli-units, counts, and the day's changes
-- of active subscriptions and MRR (a level is the sum of every earlier day's changes). `shard`
-- spreads one day's row over the connections that write it (pg_backend_pid() % 16), so
-- concurrent workers never queue on one row lock; readers add the shards up.
CREATE TABLE revenue_daily (
    app_id            uuid     NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    day               date     NOT NULL,
    -- ISO 4217; XXX where the source named no price (verifyReceipt).
    currency          text     NOT NULL,
    shard             smallint NOT NULL,
    gross_milli       bigint   NOT NULL DEFAULT 0,
    purchases         bigint   NOT NULL DEFAULT 0,
    refunds_milli     bigint   NOT NULL DEFAULT 0,
    refunds           bigint   NOT NULL DEFAULT 0,
    new_subscriptions bigint   NOT NULL DEFAULT 0,
    renewals          bigint   NOT NULL DEFAULT 0,
    churned           bigint   NOT NULL DEFAULT 0,
    active_delta      bigint   NOT NULL DEFAULT 0,
    mrr_delta_milli   bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (app_id, day, currency, shard)
);

-- A plan's price as a month's worth (the MRR), from one period's start and end: the same rounding
-- and boundaries as ReceiptCore's PlanPeriod (a test holds them equal). NULL without a price.
CREATE FUNCTION receiptq_monthly_milli(price bigint, starts timestamptz, ends timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN price IS NULL OR starts IS NULL OR ends IS NULL OR ends <= starts THEN NULL
        ELSE (SELECT CASE WHEN scaled >= 0 THEN (scaled + den / 2) / den ELSE -((-scaled + den / 2) / den) END
              FROM (SELECT price * num AS scaled, den FROM (SELECT
                  CASE WHEN d < 18 THEN 52 ELSE 1 END AS num,
                  CASE WHEN d < 18 THEN 12 WHEN d < 45 THEN 1 WHEN d < 75 THEN 2 WHEN d < 135 THEN 3
                       WHEN d < 270 THEN 6 ELSE 12 END AS den
                  FROM (SELECT extract(epoch FROM ends - starts) / 86400 AS d) l) p) s)
    END
$$;
