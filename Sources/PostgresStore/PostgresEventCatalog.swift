import Foundation
import Libpq
import ReceiptCore

/// The events API's read side of the `events` table.
///
/// Events are listed in (writing transaction, id) order, and only those written by transactions
/// older than every transaction still running (`pg_snapshot_xmin`): a transaction that started
/// earlier but commits later would otherwise slip in behind a reader's cursor and be skipped.
public final class PostgresEventCatalog: EventCatalog {
    private let pool: PostgresConnectionPool

    /// Creates the catalog on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    static let columns = """
        e.id, e.app_id, e.type, e.environment, e.user_identifier, e.subject, e.original_transaction_id, e.transaction_id,
        e.receipt_id, e.sequence, e.occurred_at, e.recorded_at, e.data
        """

    public func events(appID: UUID, query: EventQuery) async throws -> EventPage? {
        let limit = min(max(query.limit, 1), 1000)
        let types = query.types.map { PostgresArray.literal($0.map(\.rawValue)) }
        let user = query.userIdentifier
        let after = query.after
        return try await pool.withConnection(.readOnly) { connection -> EventPage? in
            var cursor: String?
            if let after {
                guard
                    let row = try connection.query("SELECT txid::text AS txid FROM events WHERE id = \(after) AND app_id = \(appID)").rows.first,
                    let txid = row.string("txid")
                else { return nil }
                cursor = txid
            }
            let rows = try connection.query(
                """
                SELECT \(unescaped: Self.columns) FROM events e
                WHERE e.app_id = \(appID)
                  AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
                  AND (\(cursor)::xid8 IS NULL OR (e.txid, e.id) > (\(cursor)::xid8, \(after)::uuid))
                  AND (\(user)::text IS NULL OR e.user_identifier = \(user))
                  AND (\(types)::text[] IS NULL OR e.type = ANY(\(types)::text[]))
                ORDER BY e.txid, e.id
                LIMIT \(limit + 1)
                """
            ).rows
            let events = rows.prefix(limit).compactMap(Self.event)
            return EventPage(events: Array(events), hasMore: rows.count > limit)
        }
    }

    /// A row selected with ``columns``.
    static func event(_ row: PostgresRow) -> ChangeEvent? {
        guard let id = row.uuid("id"), let app = row.uuid("app_id"), let type = row.string("type").flatMap(EventType.init(rawValue:)),
            let subject = row.string("subject"), let occurredAt = row.date("occurred_at"), let recordedAt = row.date("recorded_at")
        else { return nil }
        return ChangeEvent(
            id: id, type: type, appID: app, environment: row.string("environment"), userIdentifier: row.string("user_identifier"),
            subject: subject, originalTransactionID: row.string("original_transaction_id"), transactionID: row.string("transaction_id"),
            receiptID: row.uuid("receipt_id"), sequence: Int64(row.int("sequence") ?? 0), occurredAt: occurredAt, recordedAt: recordedAt,
            data: row.string("data") ?? "{}")
    }
}
