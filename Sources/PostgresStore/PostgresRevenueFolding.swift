import Foundation
import Libpq
import ReceiptCore

/// Folds the revenue rollup's shards of past days into shard 0, a batch of (app, day, currency)
/// groups per statement (its own short transaction, autocommit).
///
/// Safe beside workers still writing such a day (a late notification, a first sight of an old
/// purchase) and beside another replica folding: the statement deletes the shards it folds and
/// adds what it deleted — the very row versions, read back by `RETURNING` after any concurrent
/// update committed — into shard 0. A worker's upsert that finds its shard gone writes a new one,
/// which the next fold takes; a second folder deletes nothing the first already took.
///
/// Not thread-safe: the folding service's thread owns it.
public final class PostgresRevenueFolding: RevenueShardFolding {
    private let connection: PostgresConnection
    private let apps: [UUID]?

    /// Creates the adapter on the service's own connection.
    /// - Parameter apps: only these apps' rows (a test sharing its database); nil for all.
    public init(connection: PostgresConnection, apps: [UUID]? = nil) {
        self.connection = connection
        self.apps = apps
    }

    public func foldShards(before day: String, limit: Int) throws -> Int {
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        let folded = try connection.query(
            """
            WITH picked AS (
                SELECT DISTINCT app_id, day, currency FROM revenue_daily
                WHERE shard <> 0 AND day < \(day)::date
                  AND (\(scope)::uuid[] IS NULL OR app_id = ANY(\(scope)::uuid[]))
                ORDER BY day, app_id, currency
                LIMIT \(limit)
            ), locked AS (
                -- Locked in key order, the order a worker's upsert locks its shard's rows in: the
                -- two never wait for each other in a circle.
                SELECT r.app_id, r.day, r.currency, r.shard FROM revenue_daily r JOIN picked USING (app_id, day, currency)
                WHERE r.shard <> 0
                ORDER BY r.app_id, r.day, r.currency, r.shard
                FOR UPDATE OF r
            ), taken AS (
                DELETE FROM revenue_daily r USING locked l
                WHERE r.app_id = l.app_id AND r.day = l.day AND r.currency = l.currency AND r.shard = l.shard
                RETURNING r.*
            ), added AS (
                INSERT INTO revenue_daily AS r (app_id, day, currency, shard, gross_milli, purchases, refunds_milli, refunds,
                                                new_subscriptions, renewals, churned, active_delta, mrr_delta_milli)
                SELECT app_id, day, currency, 0, sum(gross_milli), sum(purchases), sum(refunds_milli), sum(refunds),
                       sum(new_subscriptions), sum(renewals), sum(churned), sum(active_delta), sum(mrr_delta_milli)
                FROM taken GROUP BY app_id, day, currency
                ORDER BY app_id, day, currency
                \(unescaped: RevenueRows.adding)
            )
            -- The insert runs whether read or not (a data-modifying WITH always does).
            SELECT count(*) AS picked FROM picked
            """
        ).rows.first
        return folded?.int("picked") ?? 0
    }
}
