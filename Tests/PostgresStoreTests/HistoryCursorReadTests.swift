import Foundation
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

@testable import PostgresStore

/// The history cursors a worker's batch of jobs needs, read in one statement: each key's cursor
/// where one was stored, none for a first sight, keys of other apps kept apart; and the batch's
/// new cursors written in one statement.
@Suite("Postgres history cursors, read and written by the batch", .enabled(if: TestEnvironment.integrationEnabled))
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

    @Test("One write upserts the batch's cursors: a new one inserted, a stored one moved on, a customer read twice keeps the later read")
    func batchWrite() throws {
        let (_, connection, app) = try TestSystem.newApp(named: "cursor-writes", bundleID: "com.example.cursor.writes")
        defer { connection.close() }
        let other = try TestSystem.newApp(named: "cursor-writes-other", bundleID: "com.example.cursor.writes.other")
        defer { other.1.close() }
        _ = try connection.query(
            """
            INSERT INTO transaction_history_cursors (app_id, original_transaction_id, environment, revision)
            VALUES (\(app.id), 'stored', 'sandbox', 'old')
            """)
        func cursor(_ original: String, _ revision: String, _ environment: AppStoreEnvironment = .production) -> HistoryCursor {
            HistoryCursor(originalTransactionID: original, environment: environment, revision: revision)
        }
        try HistoryCursorRows.write(
            cursors: [
                (app.id, cursor("twice", "first")), (app.id, cursor("stored", "new")), (other.2.id, cursor("twice", "other's")),
                (app.id, cursor(#"odd "id" \ 1"#, "odd")), (app.id, cursor("twice", "second", .sandbox)),
            ], on: connection)
        try HistoryCursorRows.write(cursors: [], on: connection)
        let rows = try connection.query(
            """
            SELECT app_id::text AS app_id, original_transaction_id, environment, revision FROM transaction_history_cursors
            WHERE app_id IN (\(app.id), \(other.2.id)) ORDER BY app_id = \(other.2.id), original_transaction_id
            """
        ).rows.map {
            "\($0.string("app_id") == app.id.uuidString.lowercased() ? "app" : "other") \($0.string("original_transaction_id") ?? "") "
                + "\($0.string("environment") ?? "") \($0.string("revision") ?? "")"
        }
        #expect(
            rows == [#"app odd "id" \ 1 production odd"#, "app stored production new", "app twice sandbox second", "other twice production other's"])
    }
}
