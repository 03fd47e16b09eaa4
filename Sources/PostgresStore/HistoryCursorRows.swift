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

    /// Upserts the batch's cursors. History reads are the rare validations (first sights, imports,
    /// resyncs), so one statement per cursor, in key order: batches sharing a customer lock its row
    /// in the same order and cannot deadlock, and the last read of a batch wins.
    static func write(_ records: [ValidationRecord], on connection: PostgresConnection) throws {
        let cursors = records.compactMap { record in record.historyCursor.map { (app: record.envelope.appID, cursor: $0) } }
        for (app, cursor) in cursors.sorted(by: {
            ($0.app.uuidString, $0.cursor.originalTransactionID) < ($1.app.uuidString, $1.cursor.originalTransactionID)
        }) {
            _ = try connection.query(
                """
                INSERT INTO transaction_history_cursors (app_id, original_transaction_id, environment, revision)
                VALUES (\(app), \(cursor.originalTransactionID), \(cursor.environment.rawValue), \(cursor.revision))
                ON CONFLICT (app_id, original_transaction_id) DO UPDATE
                SET environment = EXCLUDED.environment, revision = EXCLUDED.revision, updated_at = now()
                """)
        }
    }
}
