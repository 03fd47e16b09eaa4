-- receiptq_monthly_milli, the MRR of a plan's price (0030), as one expression the planner inlines
-- into the rollup's statements. The first version computed it in sub-selects, which keeps Postgres
-- from inlining a SQL function: every call went through the SQL-function executor, ~12 µs each on
-- this machine (200,000 calls: 2.4 s, against 0.04 s inlined), once or twice per subscription a
-- worker stores — most of what the revenue rollup added to a validation's Postgres CPU. Same
-- periods, boundaries and rounding (half away from zero) as before and as ReceiptCore's
-- PlanPeriod; RevenueRollupTests holds them equal and checks the planner inlines it.
CREATE OR REPLACE FUNCTION receiptq_monthly_milli(price bigint, starts timestamptz, ends timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN price IS NULL OR starts IS NULL OR ends IS NULL OR ends <= starts THEN NULL
        -- Integer division truncates toward zero, so adding half the divisor with the price's sign
        -- rounds halves away from zero either side.
        WHEN extract(epoch FROM ends - starts) < 18 * 86400 THEN (price * 52 + CASE WHEN price < 0 THEN -6 ELSE 6 END) / 12
        WHEN extract(epoch FROM ends - starts) < 45 * 86400 THEN price
        WHEN extract(epoch FROM ends - starts) < 75 * 86400 THEN (price + CASE WHEN price < 0 THEN -1 ELSE 1 END) / 2
        WHEN extract(epoch FROM ends - starts) < 135 * 86400 THEN (price + CASE WHEN price < 0 THEN -1 ELSE 1 END) / 3
        WHEN extract(epoch FROM ends - starts) < 270 * 86400 THEN (price + CASE WHEN price < 0 THEN -3 ELSE 3 END) / 6
        ELSE (price + CASE WHEN price < 0 THEN -6 ELSE 6 END) / 12
    END
$$;
