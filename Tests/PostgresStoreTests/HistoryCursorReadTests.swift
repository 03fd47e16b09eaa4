import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The history cursors a worker's batch of jobs needs, read in one statement: each key's cursor
/// where one was stored, none for a first sight, keys of other apps kept apart.
@Suite("Postgres history cursors, read by the batch", .enabled(if: TestEnvironment.integrationEnabled))
struct HistoryCursorReadTests {
    @Test("One read answers every key that has a cursor, and only those, whatever the id holds")
    func batchRead() throws {
        let (configuration, connection, app) = try TestSystem.newApp(named: "cursors", bundleID: "com.example.cursors")
        defer { connection.close() }
        let other = try TestSystem.newApp(named: "cursors-other", bundleID: "com.example.cursors.other")
        defer { other.1.close() }
        for (appID, original, revision) in [(app.id, "1000", "rev-a"), (app.id, #"odd "id" \ 1"#, "rev-b"), (other.2.id, "1000", "rev-c")] {
            _ = try connection.query(
                """
                INSERT INTO transaction_history_cursors (app_id, original_transaction_id, environment, revision)
                VALUES (\(appID), \(original), 'production', \(revision))
                """)
        }
        let store = PostgresReceiptStore(connection: try PostgresConnection(configuration: configuration.postgres))
        let keys: Set<HistoryKey> = [
            HistoryKey(appID: app.id, originalTransactionID: "1000"), HistoryKey(appID: app.id, originalTransactionID: #"odd "id" \ 1"#),
            HistoryKey(appID: app.id, originalTransactionID: "never-read"), HistoryKey(appID: other.2.id, originalTransactionID: "1000"),
        ]
        let cursors = try store.historyCursors(keys)
        #expect(cursors.count == 3)
        #expect(cursors[HistoryKey(appID: app.id, originalTransactionID: "1000")]?.revision == "rev-a")
        #expect(cursors[HistoryKey(appID: app.id, originalTransactionID: #"odd "id" \ 1"#)]?.revision == "rev-b")
        #expect(cursors[HistoryKey(appID: other.2.id, originalTransactionID: "1000")]?.revision == "rev-c")
        #expect(cursors[HistoryKey(appID: app.id, originalTransactionID: "1000")]?.environment == .production)
        #expect(try store.historyCursors([]).isEmpty)
    }
}
