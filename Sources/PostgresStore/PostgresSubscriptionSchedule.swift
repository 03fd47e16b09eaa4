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

    public func claimDue(
        now: Date, limit: Int, lease: Date, safetyNet: RepollSafetyNet, enqueue: ([DueSubscription]) throws -> Int
    ) throws -> RepollClaim {
        guard limit > 0 else { return RepollClaim() }
        let scope = apps.map { PostgresArray.literal($0.map(\.uuidString)) }
        return try connection.transaction { connection in
            try restoreSkippedPolls(now: now, safetyNet: safetyNet, scope: scope, on: connection)
            // The rows stay locked until the commit: another replica skips them, and this one
            // advances them only after Redis has the jobs.
            let rows = try connection.query(
                """
                SELECT s.app_id, s.environment, s.original_transaction_id, s.poll_seq, s.receipt_id, s.user_identifier,
                       COALESCE(r.latest_receipt, r.receipt_data) AS receipt, r.style, r.bundle_id, r.source,
                       s.state, s.expires_at, s.purchased_at, s.grace_period_expires_at, s.notified_at, s.last_polled_at,
                       a.last_notification_at
                FROM subscriptions s JOIN receipts r ON r.id = s.receipt_id
                LEFT JOIN app_notification_activity a ON a.app_id = s.app_id AND a.environment = s.environment
                WHERE s.next_poll_at <= \(now)
                  AND (\(scope)::uuid[] IS NULL OR s.app_id = ANY(\(scope)::uuid[]))
                ORDER BY s.next_poll_at
                LIMIT \(limit)
                FOR UPDATE OF s SKIP LOCKED
                """
            ).rows
            var due: [DueSubscription] = []
            var skipped: [(subscription: DueSubscription, until: Date)] = []
            for row in rows {
                guard let app = row.uuid("app_id"), let environment = row.string("environment"),
                    let originalTransactionID = row.string("original_transaction_id"), let receiptID = row.uuid("receipt_id"),
                    let receipt = row.string("receipt")
                else { continue }
                let subscription = DueSubscription(
                    appID: app, environment: environment, originalTransactionID: originalTransactionID,
                    pollSequence: row.int("poll_seq") ?? 0, receiptID: receiptID, receipt: receipt,
                    style: row.string("style").flatMap(ReceiptStyle.init(rawValue:)), bundleID: row.string("bundle_id"),
                    userIdentifier: row.string("user_identifier"), source: Self.repollSource(row.string("source"), receipt: receipt))
                switch safetyNet.decide(Self.candidate(row), at: now) {
                case .poll: due.append(subscription)
                case .skip(let until): skipped.append((subscription, until))
                }
            }
            if !skipped.isEmpty {
                var keys = ColumnBatch([.uuid, .text, .text, .timestamptz])
                for (subscription, until) in skipped {
                    keys.append([
                        .uuid(subscription.appID), .text(subscription.environment), .text(subscription.originalTransactionID), .date(until),
                    ])
                }
                // The first skip remembers the poll it moved; a later one (a lease's, say) keeps it.
                _ = try connection.query(
                    """
                    UPDATE subscriptions s SET skipped_poll_at = COALESCE(s.skipped_poll_at, s.next_poll_at),
                        next_poll_at = k.until, updated_at = now()
                    FROM unnest(\(keys[0])::uuid[], \(keys[1])::text[], \(keys[2])::text[], \(keys[3])::timestamptz[])
                      AS k(app_id, environment, original_transaction_id, until)
                    WHERE s.app_id = k.app_id AND s.environment = k.environment
                      AND s.original_transaction_id = k.original_transaction_id
                    """)
            }
            let claim = RepollClaim(claimed: rows.count, skippedApps: skipped.map(\.subscription.appID))
            guard !due.isEmpty else { return claim }
            let queued = min(max(0, try enqueue(due)), due.count)
            guard queued > 0 else { return claim }
            let advanced = due.prefix(queued)
            _ = try connection.query(
                """
                UPDATE subscriptions s SET next_poll_at = \(lease), poll_seq = s.poll_seq + 1, skipped_poll_at = NULL,
                    updated_at = now()
                FROM unnest(\(PostgresArray.literal(advanced.map(\.appID.uuidString)))::uuid[],
                            \(PostgresArray.literal(advanced.map(\.environment)))::text[],
                            \(PostgresArray.literal(advanced.map(\.originalTransactionID)))::text[])
                  AS k(app_id, environment, original_transaction_id)
                WHERE s.app_id = k.app_id AND s.environment = k.environment
                  AND s.original_transaction_id = k.original_transaction_id
                """)
            return RepollClaim(claimed: claim.claimed, queued: Array(advanced), skippedApps: claim.skippedApps)
        }
    }

    /// What the safety net reads of a due row.
    private static func candidate(_ row: PostgresRow) -> RepollSafetyNet.Candidate {
        let expiresAt = row.date("expires_at")
        let purchasedAt = row.date("purchased_at")
        var period: TimeInterval?
        if let expiresAt, let purchasedAt, expiresAt > purchasedAt { period = expiresAt.timeIntervalSince(purchasedAt) }
        return RepollSafetyNet.Candidate(
            status: row.string("state").flatMap(SubscriptionStatus.init(rawValue:)) ?? .active, expiresAt: expiresAt,
            gracePeriodExpiresAt: row.date("grace_period_expires_at"), period: period, notifiedAt: row.date("notified_at"),
            lastPolledAt: row.date("last_polled_at"), appNotifiedAt: row.date("last_notification_at"))
    }

    /// Gives the subscriptions skipped for an app whose notifications stopped arriving their skipped
    /// poll back: today's schedule, due at once if that poll has passed. Apps that never had a
    /// notification have no skipped rows; the partial index holds only skipped ones. At most
    /// `restoreBatch` rows a claim, and none another replica holds (`SKIP LOCKED`: two replicas
    /// restoring the same app neither wait for each other nor deadlock); the next claims take the rest.
    private func restoreSkippedPolls(now: Date, safetyNet: RepollSafetyNet, scope: String?, on connection: PostgresConnection) throws {
        let freshSince: Date? = safetyNet.freshWindow > .zero ? safetyNet.freshSince(now) : nil
        _ = try connection.query(
            """
            UPDATE subscriptions s SET next_poll_at = LEAST(s.next_poll_at, s.skipped_poll_at), skipped_poll_at = NULL,
                updated_at = now()
            WHERE (s.app_id, s.environment, s.original_transaction_id) IN (
                SELECT t.app_id, t.environment, t.original_transaction_id
                FROM subscriptions t JOIN app_notification_activity a ON a.app_id = t.app_id AND a.environment = t.environment
                WHERE t.skipped_poll_at IS NOT NULL
                  AND (\(freshSince)::timestamptz IS NULL OR a.last_notification_at < \(freshSince))
                  AND (\(scope)::uuid[] IS NULL OR t.app_id = ANY(\(scope)::uuid[]))
                LIMIT \(Self.restoreBatch)
                FOR UPDATE OF t SKIP LOCKED)
            """)
    }

    /// The most skipped polls one claim gives back.
    static let restoreBatch = 10_000

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

extension PostgresSubscriptionSchedule {
    /// The re-poll's source from its receipt row's: a StoreKit 2 transaction (signed, or a bare id)
    /// keeps its source, so the planner asks the Server API for it. A notification's row holds a
    /// V2 notification's signed payload (a compact JWS: only the Server API can poll its
    /// subscription, even for an app on `verifyReceipt`, which would answer 21002) or a V1
    /// notification's latest receipt (polled as a receipt, as its app's backend does). Rows stored
    /// before notifications' rows were marked say `receipt`: their text tells them apart too.
    static func repollSource(_ stored: String?, receipt: String) -> JobSource {
        switch stored.flatMap(JobSource.init(rawValue:)) {
        case .signedTransaction?: .signedTransaction
        case .transactionID?: .transactionID
        case .notification?, .receipt?, nil:
            // Base64 has no dot; a compact JWS has exactly two, after a JSON header ("eyJ" = `{"`).
            receipt.hasPrefix("eyJ") && receipt.utf8.lazy.filter { $0 == UInt8(ascii: ".") }.count == 2 ? .signedTransaction : .receipt
        }
    }
}
