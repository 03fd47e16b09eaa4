import Foundation
import Libpq
import ReceiptCore

/// The `notifications` audit table, and what it decides before a notification's changes are
/// written: whether it is new (the unique `(app_id, notification_uuid)` is the dedupe, so Apple's
/// retries and history replays are recorded once and applied once), whether it is older than
/// what is known (recorded as `stale`; the ledger's and subscriptions' guards keep the newer
/// state), and which stored receipt its changes are filed under.
enum NotificationRows {
    /// The group without the notifications already stored (duplicates), each remaining one filed
    /// under the receipt that holds its subscription or purchase, with that receipt's user; their
    /// audit rows are written here, in the same transaction as their changes.
    static func prepare(_ records: [ValidationRecord], on connection: PostgresConnection) throws -> [ValidationRecord] {
        let indices = records.indices.filter { records[$0].isNotification }
        guard !indices.isEmpty else { return records }
        var records = records
        let known = try lookUp(indices.map { records[$0] }, on: connection)
        var audit = ColumnBatch([
            .uuid, .uuid, .text, .text, .text, .text, .text, .timestamptz, .text, .text, .text, .uuid, .text, .text, .text, .timestamptz,
        ])
        for (index, found) in zip(indices, known) {
            guard let notification = records[index].notification else { continue }
            var record = records[index]
            let changes = !record.purchases.isEmpty || !record.subscriptions.isEmpty
            let stale =
                changes
                && ((found.subscriptionObservedAt.map { $0 > notification.signedDate } ?? false && !record.subscriptions.isEmpty)
                    || (found.transactionSignedAt.map { $0 > notification.signedDate } ?? false))
            let outcome: NotificationOutcome = !changes ? .recorded : stale ? .stale : .applied
            record.filedUnder = found.receiptID
            if record.userIdentifier == nil { record.userIdentifier = found.userIdentifier }
            records[index] = record
            let envelope = record.envelope
            audit.append([
                .uuid(envelope.id), .uuid(envelope.appID), .text(notification.uuid), .text(notification.version.rawValue),
                .text(notification.type), .text(notification.subtype), .text(notification.environment), .date(notification.signedDate),
                .text(record.notificationOriginalTransactionID), .text(record.notificationTransactionID),
                .text(notification.transaction?["productId"]?.stringValue ?? record.purchases.first?.productID),
                // Filed under its own receipts row only when it changes something no stored receipt holds.
                .uuid(changes ? (found.receiptID ?? envelope.id) : nil), .text(outcome.rawValue),
                .text(notification.display.encodedText), .text(envelope.origin.rawValue), .date(envelope.enqueuedAt),
            ])
        }
        // The receipts rows the audit rows point at are written after them: the reference is
        // deferred to the commit, where both exist.
        let inserted = Set(
            try connection.query(
                """
                INSERT INTO notifications (id, app_id, notification_uuid, version, notification_type, subtype, environment,
                    signed_at, original_transaction_id, transaction_id, product_id, receipt_id, outcome, payload, origin, received_at)
                SELECT u.id, u.app_id, u.uuid, u.version, u.type, u.subtype, u.environment, u.signed_at, u.original_transaction_id,
                    u.transaction_id, u.product_id, u.receipt_id, u.outcome, u.payload::jsonb, u.origin, u.received_at
                FROM unnest(\(audit[0])::uuid[], \(audit[1])::uuid[], \(audit[2])::text[], \(audit[3])::text[], \(audit[4])::text[],
                    \(audit[5])::text[], \(audit[6])::text[], \(audit[7])::timestamptz[], \(audit[8])::text[], \(audit[9])::text[],
                    \(audit[10])::text[], \(audit[11])::uuid[], \(audit[12])::text[], \(audit[13])::text[], \(audit[14])::text[],
                    \(audit[15])::timestamptz[])
                  AS u(id, app_id, uuid, version, type, subtype, environment, signed_at, original_transaction_id, transaction_id,
                       product_id, receipt_id, outcome, payload, origin, received_at)
                ON CONFLICT (app_id, notification_uuid) DO NOTHING
                RETURNING id
                """
            ).rows.compactMap { $0.uuid("id") })
        // A duplicate (or a replay of a job whose commit succeeded) changes nothing.
        return records.filter { !$0.isNotification || inserted.contains($0.envelope.id) }
    }

    /// The `RESCIND_CONSENT` notifications among `records` (already new: ``prepare(_:on:)`` kept
    /// no duplicate), each with the user whose stored app transaction it names: one statement.
    static func consents(_ records: [ValidationRecord], on connection: PostgresConnection) throws -> [EventRows.ConsentChange] {
        var changes: [EventRows.ConsentChange] = []
        for record in records {
            guard let notification = record.notification, notification.type == NotificationTypes.rescindConsent else { continue }
            changes.append(
                EventRows.ConsentChange(
                    appID: record.envelope.appID, environment: notification.environment, notificationUUID: notification.uuid,
                    appTransactionID: notification.appTransaction?["appTransactionId"]?.stringValue, userIdentifier: nil,
                    signedAt: notification.signedDate))
        }
        let keyed = changes.indices.filter { changes[$0].appTransactionID != nil }
        guard !keyed.isEmpty else { return changes }
        var keys = ColumnBatch([.uuid, .text, .text])
        for index in keyed {
            keys.append([.uuid(changes[index].appID), .text(changes[index].environment ?? "production"), .text(changes[index].appTransactionID)])
        }
        let rows = try connection.query(
            """
            SELECT k.i, a.user_identifier
            FROM unnest(\(keys[0])::uuid[], \(keys[1])::text[], \(keys[2])::text[]) WITH ORDINALITY AS k(app_id, environment, id, i)
            JOIN LATERAL (
                SELECT user_identifier FROM app_transactions a
                WHERE a.app_id = k.app_id AND a.environment = k.environment AND a.app_transaction_id = k.id
                ORDER BY a.signed_at DESC LIMIT 1) a ON true
            """
        ).rows
        for row in rows {
            guard let ordinal = row.int("i"), (1...keyed.count).contains(ordinal) else { continue }
            changes[keyed[ordinal - 1]].userIdentifier = row.string("user_identifier")
        }
        return changes
    }

    /// What is stored about each notification's subscription and transaction.
    private struct Known {
        var receiptID: UUID?
        var userIdentifier: String?
        var subscriptionObservedAt: Date?
        var transactionSignedAt: Date?
    }

    /// One statement for the whole group: the subscription row, the oldest ledger row of the same
    /// original transaction (preferring one with a user), and the transaction's own ledger row.
    private static func lookUp(_ records: [ValidationRecord], on connection: PostgresConnection) throws -> [Known] {
        var keys = ColumnBatch([.uuid, .text, .text, .text])
        for record in records {
            keys.append([
                .uuid(record.envelope.appID), .text(record.ledgerEnvironment),
                .text(record.notificationOriginalTransactionID ?? ""), .text(record.notificationTransactionID ?? ""),
            ])
        }
        // Index look-ups, whatever the statistics say: a burst of notifications about purchases no
        // receipt brought grows the ledger faster than autovacuum analyses it, and on the stale
        // statistics of a small table the planner scans it whole for every key (a run of 20,000 cost
        // Postgres 3.3 ms of CPU per notification that way). LOCAL: until the end of the transaction.
        _ = try connection.query("SET LOCAL enable_seqscan = off")
        defer { _ = try? connection.query("SET LOCAL enable_seqscan = on") }
        let rows = try connection.query(
            """
            SELECT k.i, COALESCE(s.receipt_id, p.receipt_id) AS receipt_id,
                   COALESCE(s.user_identifier, p.user_identifier) AS user_identifier,
                   s.observed_at, t.signed_at
            FROM unnest(\(keys[0])::uuid[], \(keys[1])::text[], \(keys[2])::text[], \(keys[3])::text[])
                 WITH ORDINALITY AS k(app_id, environment, original_transaction_id, transaction_id, i)
            LEFT JOIN subscriptions s ON s.app_id = k.app_id AND s.environment = k.environment
                 AND s.original_transaction_id = k.original_transaction_id
            LEFT JOIN LATERAL (
                SELECT receipt_id, user_identifier FROM in_app_purchases p
                WHERE p.app_id = k.app_id AND p.environment = k.environment AND p.original_transaction_id = k.original_transaction_id
                ORDER BY p.user_identifier IS NULL, p.id LIMIT 1) p ON true
            LEFT JOIN in_app_purchases t ON t.environment = k.environment AND t.transaction_id = k.transaction_id
                 AND t.app_id = k.app_id
            ORDER BY k.i
            """
        ).rows
        var known = Array(repeating: Known(), count: records.count)
        for row in rows {
            guard let ordinal = row.int("i"), (1...records.count).contains(ordinal) else { continue }
            known[ordinal - 1] = Known(
                receiptID: row.uuid("receipt_id"), userIdentifier: row.string("user_identifier"),
                subscriptionObservedAt: row.date("observed_at"), transactionSignedAt: row.date("signed_at"))
        }
        return known
    }
}

extension ValidationRecord {
    /// The original transaction a notification is about (its subscription, or its purchase).
    var notificationOriginalTransactionID: String? {
        guard let notification else { return nil }
        return notification.transaction?["originalTransactionId"]?.stringValue ?? subscriptions.first?.state.originalTransactionID
            ?? purchases.first?.originalTransactionID
    }

    /// Whether storing this record writes a receipts row of its own: every validation does; a
    /// re-poll never; a notification only when it changes something no stored receipt holds.
    var writesReceiptRow: Bool {
        if isRepoll { return false }
        guard isNotification else { return true }
        return filedUnder == nil && (!purchases.isEmpty || !subscriptions.isEmpty)
    }
}
