import Foundation
import Libpq
import ReceiptCore

/// The revenue figures from the rollup the worker keeps (`revenue_daily`): a range of days is one
/// indexed read of that range plus one sum of every earlier day's changes (the levels at its
/// start), never a scan of the ledger. Thread-safe: each read takes a connection of the pool.
public final class PostgresRevenueFigures: RevenueFigures {
    private let pool: PostgresConnectionPool

    /// Creates the reader.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    public func revenue(appID: UUID, from: String, to: String) async throws -> [RevenueDay]? {
        try await pool.withConnection { connection in
            guard try !connection.query("SELECT 1 FROM apps WHERE id = \(appID)").rows.isEmpty else { return nil }
            let opening = try connection.query(
                """
                SELECT currency, sum(active_delta)::text AS active, sum(mrr_delta_milli)::text AS mrr
                FROM revenue_daily WHERE app_id = \(appID) AND day < \(from)::date GROUP BY currency
                """
            ).rows.reduce(into: [String: (active: Int64, mrrMilli: Int64)]()) { levels, row in
                guard let currency = row.string("currency") else { return }
                levels[currency] = (Self.int(row, "active"), Self.int(row, "mrr"))
            }
            let flows = try connection.query(
                """
                SELECT day::text AS day, currency, sum(gross_milli)::text AS gross_milli, sum(purchases)::text AS purchases,
                       sum(refunds_milli)::text AS refunds_milli, sum(refunds)::text AS refunds,
                       sum(new_subscriptions)::text AS new_subscriptions, sum(renewals)::text AS renewals,
                       sum(churned)::text AS churned, sum(active_delta)::text AS active_delta,
                       sum(mrr_delta_milli)::text AS mrr_delta_milli
                FROM revenue_daily WHERE app_id = \(appID) AND day BETWEEN \(from)::date AND \(to)::date
                GROUP BY day, currency
                """
            ).rows.compactMap(Self.flows)
            return RevenueDay.figures(from: from, to: to, opening: opening, flows: flows)
        }
    }

    public func currentLevels(at now: Date) async throws -> [RevenueLevel] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT a.bundle_id, r.currency, sum(r.active_delta)::text AS active, sum(r.mrr_delta_milli)::text AS mrr
                FROM revenue_daily r JOIN apps a ON a.id = r.app_id
                WHERE r.day <= (\(now)::timestamptz AT TIME ZONE 'UTC')::date
                GROUP BY a.bundle_id, r.currency ORDER BY a.bundle_id, r.currency
                """
            ).rows.compactMap { row in
                guard let app = row.string("bundle_id"), let currency = row.string("currency") else { return nil }
                return RevenueLevel(app: app, currency: currency, activeSubscriptions: Self.int(row, "active"), mrrMilli: Self.int(row, "mrr"))
            }
        }
    }

    /// A bigint column read as text (a sum of bigints is numeric, and may pass Int's 32 bits nowhere).
    private static func int(_ row: PostgresRow, _ column: String) -> Int64 {
        row.string(column).flatMap { Int64($0) } ?? 0
    }

    private static func flows(_ row: PostgresRow) -> RevenueFlows? {
        guard let day = row.string("day"), let currency = row.string("currency") else { return nil }
        var flows = RevenueFlows(day: day, currency: currency)
        flows.grossMilli = int(row, "gross_milli")
        flows.purchases = int(row, "purchases")
        flows.refundsMilli = int(row, "refunds_milli")
        flows.refunds = int(row, "refunds")
        flows.newSubscriptions = int(row, "new_subscriptions")
        flows.renewals = int(row, "renewals")
        flows.churned = int(row, "churned")
        flows.activeDelta = int(row, "active_delta")
        flows.mrrDeltaMilli = int(row, "mrr_delta_milli")
        return flows
    }
}
