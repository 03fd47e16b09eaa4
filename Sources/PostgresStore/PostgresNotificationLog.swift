import Foundation
import Libpq
import ReceiptCore

/// The dashboard's read side of the `notifications` table.
public final class PostgresNotificationLog: NotificationLog {
    private let pool: PostgresConnectionPool

    /// Creates the log on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    /// When the notification `notificationUUID` of the app was stored, and its outcome
    /// (`receiptq notifications test` waits for Apple's test notification with it).
    public static func arrival(
        appID: UUID, notificationUUID: String, on connection: PostgresConnection
    ) async throws -> (
        storedAt: Date, outcome: String?
    )? {
        guard
            let row = try await connection.query(
                "SELECT created_at, outcome FROM notifications WHERE app_id = \(appID) AND notification_uuid = \(notificationUUID)"
            ).rows.first, let stored = row.date("created_at")
        else { return nil }
        return (stored, row.string("outcome"))
    }

    private static let columns = """
        id, app_id, notification_uuid, version, notification_type, subtype, environment, signed_at, received_at, outcome,
        original_transaction_id, transaction_id, product_id
        """

    public func list(filter: NotificationFilter, offset: Int, limit: Int) async throws -> (entries: [NotificationSummary], hasMore: Bool) {
        let type = filter.type
        let appID = filter.appID
        let rows = try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT \(unescaped: Self.columns) FROM notifications
                WHERE (\(type)::text IS NULL OR notification_type = \(type)) AND (\(appID)::uuid IS NULL OR app_id = \(appID))
                ORDER BY created_at DESC, id DESC
                OFFSET \(max(0, offset)) LIMIT \(max(1, limit) + 1)
                """
            ).rows
        }
        let entries = rows.prefix(max(1, limit)).compactMap(Self.summary)
        return (Array(entries), rows.count > max(1, limit))
    }

    public func notification(id: UUID) async throws -> (summary: NotificationSummary, payload: JSONValue)? {
        let row = try await pool.withConnection { connection in
            try connection.query("SELECT \(unescaped: Self.columns), payload::text AS payload FROM notifications WHERE id = \(id)").rows.first
        }
        guard let row, let summary = Self.summary(row) else { return nil }
        let payload = row.string("payload").flatMap { try? JSONValue.parse(Array($0.utf8)) } ?? .object([:])
        return (summary, payload)
    }

    public func counts(since: Date) async throws -> [NotificationCount] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT notification_type, outcome, count(*) AS n FROM notifications WHERE created_at >= \(since)
                GROUP BY notification_type, outcome ORDER BY notification_type, outcome
                """
            ).rows.compactMap { row in
                guard let type = row.string("notification_type"), let outcome = row.string("outcome").flatMap(NotificationOutcome.init),
                    let count = row.int("n")
                else { return nil }
                return NotificationCount(type: type, outcome: outcome, count: count)
            }
        }
    }

    private static func summary(_ row: PostgresRow) -> NotificationSummary? {
        guard let id = row.uuid("id"), let appID = row.uuid("app_id"), let uuid = row.string("notification_uuid"),
            let version = row.string("version").flatMap(NotificationVersion.init), let type = row.string("notification_type"),
            let signedAt = row.date("signed_at"), let receivedAt = row.date("received_at"),
            let outcome = row.string("outcome").flatMap(NotificationOutcome.init)
        else { return nil }
        return NotificationSummary(
            id: id, appID: appID, uuid: uuid, version: version, type: type, subtype: row.string("subtype"),
            environment: row.string("environment"), signedAt: signedAt, receivedAt: receivedAt, outcome: outcome,
            originalTransactionID: row.string("original_transaction_id"), transactionID: row.string("transaction_id"),
            productID: row.string("product_id"))
    }
}
