/// The revenue rollup's writes (issue 43): common table expressions the ledger's upsert and the
/// subscriptions' upsert end with, so that what a batch changed is added to `revenue_daily` in the
/// batch's own transaction, from the rows the upsert actually wrote (a replay writes none, and adds
/// nothing). Each adds one row per app, day and currency into the writing connection's shard
/// (`pg_backend_pid() % 16`), in key order, so concurrent batches neither queue on one hot row nor
/// deadlock.
enum RevenueRows {
    /// The upsert of the day's sums, `flows` being a query of `app_id, day, currency` and the
    /// counters it adds (any it lacks are 0).
    private static func upsert(_ flows: String) -> String {
        """
        , revenue AS (
            INSERT INTO revenue_daily AS r (app_id, day, currency, shard, gross_milli, purchases, refunds_milli, refunds,
                                            new_subscriptions, renewals, churned, active_delta, mrr_delta_milli)
            SELECT f.app_id, f.day, f.currency, (pg_backend_pid() % 16)::smallint, sum(f.gross_milli), sum(f.purchases),
                   sum(f.refunds_milli), sum(f.refunds), sum(f.new_subscriptions), sum(f.renewals), sum(f.churned),
                   sum(f.active_delta), sum(f.mrr_delta_milli)
            FROM (\(flows)) f
            GROUP BY f.app_id, f.day, f.currency
            -- A subscription re-polled unchanged adds nothing: no row written.
            HAVING sum(f.gross_milli) <> 0 OR sum(f.purchases) <> 0 OR sum(f.refunds_milli) <> 0 OR sum(f.refunds) <> 0
                OR sum(f.new_subscriptions) <> 0 OR sum(f.renewals) <> 0 OR sum(f.churned) <> 0 OR sum(f.active_delta) <> 0
                OR sum(f.mrr_delta_milli) <> 0
            ORDER BY f.app_id, f.day, f.currency
            \(adding)
        )
        """
    }

    /// The end of an insert into `revenue_daily AS r` that adds to a row already there: a day's
    /// counters only ever grow by what is added (the rollup's deltas, a fold's sums).
    static let adding = """
        ON CONFLICT (app_id, day, currency, shard) DO UPDATE SET
            gross_milli = r.gross_milli + EXCLUDED.gross_milli, purchases = r.purchases + EXCLUDED.purchases,
            refunds_milli = r.refunds_milli + EXCLUDED.refunds_milli, refunds = r.refunds + EXCLUDED.refunds,
            new_subscriptions = r.new_subscriptions + EXCLUDED.new_subscriptions,
            renewals = r.renewals + EXCLUDED.renewals, churned = r.churned + EXCLUDED.churned,
            active_delta = r.active_delta + EXCLUDED.active_delta,
            mrr_delta_milli = r.mrr_delta_milli + EXCLUDED.mrr_delta_milli
        """

    /// What one purchase row has refunded, as milli-units, from columns prefixed `p`: a revoked
    /// purchase its refunded share or else its price, a prorated refund its share; a Family Sharing
    /// revocation refunds nobody.
    private static func refunded(_ p: String) -> String {
        """
        CASE WHEN \(p).revocation_type = 'FAMILY_REVOKE' THEN 0
             WHEN \(p).cancellation_date IS NOT NULL THEN COALESCE(\(p).refunded_milli, \(p).price_milli, 0)
             WHEN \(p).revocation_type = 'REFUND_PRORATED' THEN COALESCE(\(p).refunded_milli, 0)
             ELSE 0 END
        """
    }

    /// Whether a purchase row counts as refunded (columns prefixed `p`): never NULL, so that a
    /// purchase never refunded (or not there before) compares as `false`, not as unknown.
    private static func isRefunded(_ p: String) -> String {
        """
        (COALESCE(\(p).revocation_type, '') <> 'FAMILY_REVOKE'
         AND (\(p).cancellation_date IS NOT NULL OR COALESCE(\(p).revocation_type, '') = 'REFUND_PRORATED'))
        """
    }

    /// After the ledger's upsert (`written` the rows it wrote, `old` what they were): a new
    /// transaction is a purchase (gross, on its purchase day; a subscription's first one a new
    /// subscription, a later one a renewal), a price learnt later moves it from `XXX` to its
    /// currency, and a change of what was refunded is a refund (or its reversal) on the day it
    /// was revoked (else the day of the answer that said so). A family member's shared purchase
    /// earns nothing.
    static let purchaseFlows = upsert(
        """
        SELECT w.app_id, (w.purchase_date AT TIME ZONE 'UTC')::date AS day, COALESCE(w.currency, 'XXX') AS currency,
               COALESCE(w.price_milli, 0) AS gross_milli, 1 AS purchases, 0 AS refunds_milli, 0 AS refunds,
               (w.expires_date IS NOT NULL AND w.transaction_id = w.original_transaction_id)::int AS new_subscriptions,
               (w.expires_date IS NOT NULL AND w.transaction_id <> w.original_transaction_id)::int AS renewals,
               0 AS churned, 0 AS active_delta, 0 AS mrr_delta_milli
        FROM written w LEFT JOIN old o ON o.environment = w.environment AND o.transaction_id = w.transaction_id
        WHERE o.transaction_id IS NULL AND w.ownership_type IS DISTINCT FROM 'FAMILY_SHARED'
        UNION ALL
        SELECT w.app_id, (w.purchase_date AT TIME ZONE 'UTC')::date, c.currency, c.priced * w.price_milli, c.count,
               0, 0, 0, 0, 0, 0, 0
        FROM written w JOIN old o ON o.environment = w.environment AND o.transaction_id = w.transaction_id
        CROSS JOIN LATERAL (VALUES ('XXX', 0, -1), (w.currency, 1, 1)) AS c(currency, priced, count)
        WHERE o.price_milli IS NULL AND w.price_milli IS NOT NULL AND w.currency IS NOT NULL
          AND w.ownership_type IS DISTINCT FROM 'FAMILY_SHARED'
        UNION ALL
        SELECT w.app_id, (COALESCE(w.cancellation_date, w.signed_at, now()) AT TIME ZONE 'UTC')::date,
               COALESCE(w.currency, 'XXX'), 0, 0,
               \(refunded("w")) - COALESCE(\(refunded("o")), 0),
               \(isRefunded("w"))::int - \(isRefunded("o"))::int, 0, 0, 0, 0, 0
        FROM written w LEFT JOIN old o ON o.environment = w.environment AND o.transaction_id = w.transaction_id
        WHERE w.ownership_type IS DISTINCT FROM 'FAMILY_SHARED'
          AND (\(refunded("w")) <> COALESCE(\(refunded("o")), 0)
               OR \(isRefunded("w")) <> \(isRefunded("o")))
        """)

    /// After the subscriptions' upsert (`written`, `old`): a subscription that starts entitling
    /// adds one active subscription and its plan's monthly price to the MRR on the day of Apple's
    /// answer, one that stops takes them away (and, ended, expired or refunded, counts as churned),
    /// and a new price or currency moves its MRR.
    static let subscriptionFlows = upsert(
        """
        SELECT w.app_id, (w.observed_at AT TIME ZONE 'UTC')::date AS day, COALESCE(w.currency, 'XXX') AS currency,
               0 AS gross_milli, 0 AS purchases, 0 AS refunds_milli, 0 AS refunds, 0 AS new_subscriptions, 0 AS renewals,
               0 AS churned, 1 AS active_delta,
               COALESCE(receiptq_monthly_milli(w.price_milli, w.purchased_at, w.expires_at), 0) AS mrr_delta_milli
        FROM written w
        WHERE w.state IN ('active', 'grace')
        UNION ALL
        SELECT w.app_id, (w.observed_at AT TIME ZONE 'UTC')::date, COALESCE(o.currency, 'XXX'), 0, 0, 0, 0, 0, 0,
               (w.state NOT IN ('active', 'grace', 'upgraded'))::int, -1,
               -COALESCE(receiptq_monthly_milli(o.price_milli, o.purchased_at, o.expires_at), 0)
        FROM written w JOIN old o ON o.app_id = w.app_id AND o.environment = w.environment
            AND o.original_transaction_id = w.original_transaction_id
        WHERE o.state IN ('active', 'grace')
        """)
}
