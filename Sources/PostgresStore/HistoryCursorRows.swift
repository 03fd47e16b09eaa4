import Foundation
import Libpq
import ReceiptCore

/// `transaction_history_cursors`: where each customer's Get Transaction History was last read up
/// to (issue 42, item 2). Written with the validation that read it, in the same transaction.
enum HistoryCursorRows {
    /// The cursor of `originalTransactionID` of the app, if its history was ever read.
    static func read(_ keys: Set<HistoryKey>, on connection: PostgresConnection) throws -> [HistoryKey: HistoryCursor] {
        let keys = Array(keys)
        let rows = try connection.query(
            """
            SELECT c.app_id::text AS app_id, c.original_transaction_id, c.environment, c.revision
            FROM unnest(\(PostgresArray.literal(keys.map(\.appID.uuidString)))::uuid[],
                        \(PostgresArray.literal(keys.map(\.originalTransactionID)))::text[]) AS k(app_id, original_transaction_id)
            JOIN transaction_history_cursors c USING (app_id, original_transaction_id)
            """
        ).rows
        return rows.reduce(into: [:]) { cursors, row in
            guard let app = row.string("app_id").flatMap(UUID.init(uuidString:)), let original = row.string("original_transaction_id"),
                let environment = row.string("environment").flatMap(AppStoreEnvironment.init(rawValue:)), let revision = row.string("revision")
            else { return }
            cursors[HistoryKey(appID: app, originalTransactionID: original)] = HistoryCursor(
                originalTransactionID: original, environment: environment, revision: revision)
        }
    }

    /// Upserts the batch's cursors in one statement: a first-sight batch carries a cursor per job,
    /// and a statement each was a round trip and a commit's worth of parsing per job. Rows go in
    /// key order, so batches sharing a customer lock its row in the same order and cannot
    /// deadlock; of two reads of one customer in a batch the later wins (one statement may not
    /// update a row twice).
    static func write(_ records: [ValidationRecord], on connection: PostgresConnection) throws {
        try write(cursors: records.compactMap { record in record.historyCursor.map { (app: record.envelope.appID, cursor: $0) } }, on: connection)
    }

    /// Upserts `cursors`, each of its app, as ``write(_:on:)`` does a batch's.
    static func write(cursors: [(app: UUID, cursor: HistoryCursor)], on connection: PostgresConnection) throws {
        guard !cursors.isEmpty else { return }
        _ = try connection.query(
            """
            INSERT INTO transaction_history_cursors (app_id, original_transaction_id, environment, revision)
            SELECT DISTINCT ON (c.app_id, c.original_transaction_id) c.app_id, c.original_transaction_id, c.environment, c.revision
            FROM unnest(\(PostgresArray.literal(cursors.map(\.app.uuidString)))::uuid[],
                        \(PostgresArray.literal(cursors.map(\.cursor.originalTransactionID)))::text[],
                        \(PostgresArray.literal(cursors.map(\.cursor.environment.rawValue)))::text[],
                        \(PostgresArray.literal(cursors.map(\.cursor.revision)))::text[])
                 WITH ORDINALITY AS c(app_id, original_transaction_id, environment, revision, position)
            ORDER BY c.app_id, c.original_transaction_id, c.position DESC
            ON CONFLICT (app_id, original_transaction_id) DO UPDATE
            SET environment = EXCLUDED.environment, revision = EXCLUDED.revision, updated_at = now()
            """)
    }
}
