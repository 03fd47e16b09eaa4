import Foundation
import Libpq
import ReceiptCore

/// `app_notification_activity`: when each app's last Server Notification V2 arrived from Apple, per
/// environment, for the scheduler's safety net (``RepollSafetyNet``: are the app's notifications
/// arriving?). Written in the transaction that stores the notifications.
enum NotificationActivityRows {
    /// Records the arrival of the batch's V2 notifications that Apple posted (not those the history
    /// sweep recovered: those say Apple's deliveries are failing).
    static func touch(_ records: [ValidationRecord], on connection: PostgresConnection) throws {
        var latest: [String: (app: UUID, environment: String, at: Date)] = [:]
        for record in records where record.notification?.version == .v2 && record.envelope.origin == .apple {
            let environment = record.ledgerEnvironment
            let key = "\(record.envelope.appID)\u{0}\(environment)"
            // The re-poll clock's time (the safety net compares it with the scheduler's claims).
            if latest[key].map({ $0.at < record.plannedAt }) ?? true {
                latest[key] = (record.envelope.appID, environment, record.plannedAt)
            }
        }
        guard !latest.isEmpty else { return }
        var rows = ColumnBatch([.uuid, .text, .timestamptz])
        // In key order, like every other batch write: concurrent batches lock shared rows in one order.
        for key in latest.keys.sorted() {
            guard let entry = latest[key] else { continue }
            rows.append([.uuid(entry.app), .text(entry.environment), .date(entry.at)])
        }
        // At most once a minute per app: every worker's notifications would otherwise update the
        // same row in every batch and wait for each other's commits (the freshness window is hours,
        // so a minute is nothing). A plain UPDATE locks only the rows it changes; `ON CONFLICT DO
        // UPDATE … WHERE` would lock the row even when it changes nothing.
        _ = try connection.query(
            """
            WITH input AS (
                SELECT * FROM unnest(\(rows[0])::uuid[], \(rows[1])::text[], \(rows[2])::timestamptz[]) AS u(app_id, environment, at)
            ), updated AS (
                UPDATE app_notification_activity a SET last_notification_at = i.at
                FROM input i
                WHERE a.app_id = i.app_id AND a.environment = i.environment
                  AND a.last_notification_at < i.at - interval '1 minute'
                RETURNING a.app_id, a.environment
            )
            INSERT INTO app_notification_activity (app_id, environment, last_notification_at)
            SELECT i.app_id, i.environment, i.at FROM input i
            WHERE NOT EXISTS (
                SELECT 1 FROM app_notification_activity a WHERE a.app_id = i.app_id AND a.environment = i.environment)
            ON CONFLICT (app_id, environment) DO NOTHING
            """)
    }
}
