import Foundation
import Libpq
import ReceiptCore

/// The scheduler's Postgres side: claims due subscriptions with `FOR UPDATE SKIP LOCKED`, so any
/// number of scheduler replicas share the work without taking the same row.
///
/// The cost of a claim depends on the batch, not on the table: the due rows are read from the
/// partial index on `next_poll_at`, oldest first, and the receipts they re-send by primary key.
///
/// Not thread-safe: the scheduler's thread owns it.
public final class PostgresSubscriptionSchedule: SubscriptionSchedule {
    private let connection: PostgresConnection
    private let apps: [UUID]?

    /// Creates the schedule on the scheduler's own connection.
    /// - Parameter apps: only these apps' subscriptions (a replica dedicated to some apps, or a test
    ///   sharing its database with others); nil for all.
    public init(connection: PostgresConnection, apps: [UUID]? = nil) {
        self.connection = connection
        self.apps = apps
    }

    public func claimDue(now: Date, limit: Int, lease: Date, enqueue: ([DueSubscription]) throws -> Int) throws -> Int {
        guard limit > 0 else { return 0 }
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        return try connection.transaction { connection in
            // The rows stay locked until the commit: another replica skips them, and this one
            // advances them only after Redis has the jobs.
            let due = try connection.query(
                """
                SELECT s.app_id, s.environment, s.original_transaction_id, s.poll_seq, s.receipt_id, s.user_identifier,
                       COALESCE(r.latest_receipt, r.receipt_data) AS receipt, r.style, r.bundle_id
                FROM subscriptions s JOIN receipts r ON r.id = s.receipt_id
                WHERE s.next_poll_at <= \(now)
                  AND (\(scope)::uuid[] IS NULL OR s.app_id = ANY(\(scope)::uuid[]))
                ORDER BY s.next_poll_at
                LIMIT \(limit)
                FOR UPDATE OF s SKIP LOCKED
                """
            ).rows.compactMap { row -> DueSubscription? in
                guard let app = row.uuid("app_id"), let environment = row.string("environment"),
                    let originalTransactionID = row.string("original_transaction_id"), let receiptID = row.uuid("receipt_id"),
                    let receipt = row.string("receipt")
                else { return nil }
                return DueSubscription(
                    appID: app, environment: environment, originalTransactionID: originalTransactionID,
                    pollSequence: row.int("poll_seq") ?? 0, receiptID: receiptID, receipt: receipt,
                    style: row.string("style").flatMap(ReceiptStyle.init(rawValue:)), bundleID: row.string("bundle_id"),
                    userIdentifier: row.string("user_identifier"))
            }
            guard !due.isEmpty else { return 0 }
            let queued = min(max(0, try enqueue(due)), due.count)
            guard queued > 0 else { return 0 }
            let advanced = due.prefix(queued)
            _ = try connection.query(
                """
                UPDATE subscriptions s SET next_poll_at = \(lease), poll_seq = s.poll_seq + 1, updated_at = now()
                FROM unnest(\(PostgresArray.literal(advanced.map(\.appID.uuidString)))::uuid[],
                            \(PostgresArray.literal(advanced.map(\.environment)))::text[],
                            \(PostgresArray.literal(advanced.map(\.originalTransactionID)))::text[])
                  AS k(app_id, environment, original_transaction_id)
                WHERE s.app_id = k.app_id AND s.environment = k.environment
                  AND s.original_transaction_id = k.original_transaction_id
                """)
            return queued
        }
    }

    public func countDue(now: Date, limit: Int) throws -> Int {
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        // The LIMIT inside keeps the count to the partial index's first `limit` entries.
        return try connection.query(
            """
            SELECT count(*) AS due FROM (
                SELECT 1 FROM subscriptions s
                WHERE s.next_poll_at <= \(now)
                  AND (\(scope)::uuid[] IS NULL OR s.app_id = ANY(\(scope)::uuid[]))
                LIMIT \(max(0, limit))
            ) d
            """
        ).rows.first?.int("due") ?? 0
    }
}
