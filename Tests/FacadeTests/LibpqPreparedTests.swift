import Foundation
import ReceiptTesting
import SystemTesting
import Testing

@testable import Libpq

/// Statements with parameters run as named prepared statements, once parsed per session, and
/// nothing a session can lose (a reset, a migration) makes them fail.
@Suite("Libpq prepared statements", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct LibpqPreparedTests {
    func configuration(prepares: Bool = true) -> PostgresConfiguration {
        PostgresConfiguration(
            host: TestEnvironment.postgresHost, port: TestEnvironment.postgresPort, user: TestEnvironment.postgresUser,
            password: TestEnvironment.postgresPassword, database: TestEnvironment.postgresDatabase, preparesStatements: prepares)
    }

    func tableName() -> String {
        "receiptq_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
    }

    /// The session's prepared statements, as the server lists them (this query has no parameter,
    /// so it is not one of them).
    func preparedStatements(_ db: PostgresConnection) throws -> [String] {
        try db.query("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time").rows.compactMap { $0["statement"] }
    }

    @Test func aStatementIsPreparedOncePerSession() throws {
        let db = try PostgresConnection(configuration: configuration())
        defer { db.close() }
        for value in 1...3 {
            #expect(try db.query("SELECT \(value)::int + 1 AS n").rows.first?.int("n") == value + 1)
        }
        #expect(try preparedStatements(db) == ["SELECT $1::int + 1 AS n"])

        let unprepared = try PostgresConnection(configuration: configuration(prepares: false))
        defer { unprepared.close() }
        #expect(try unprepared.query("SELECT \(1)::int + 1 AS n").rows.first?.int("n") == 2)
        #expect(try preparedStatements(unprepared).isEmpty)
    }

    @Test("A new session after a lost connection prepares its statements again")
    func preparesAgainAfterAReset() throws {
        let db = try PostgresConnection(configuration: configuration())
        let admin = try PostgresConnection(configuration: configuration())
        defer {
            db.close()
            admin.close()
        }
        #expect(try db.query("SELECT \(2)::int * 2 AS n").rows.first?.int("n") == 4)
        let pid = try #require(try db.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid"))
        _ = try admin.query("SELECT pg_terminate_backend(\(pid))")
        // The session's end is found before the next statement when its socket has closed by then
        // (LibpqRecoveryTests), or by that statement failing when not yet: either way, a new session.
        _ = try? db.query("SELECT 1")
        // The old session's name means nothing to the new one.
        #expect(try db.query("SELECT \(3)::int * 2 AS n").rows.first?.int("n") == 6)
        #expect(try preparedStatements(db) == ["SELECT $1::int * 2 AS n"])
    }

    @Test("A migration that changes a table under a prepared statement costs no failed call outside a transaction")
    func aChangedTableIsPreparedAgain() throws {
        let db = try PostgresConnection(configuration: configuration())
        let admin = try PostgresConnection(configuration: configuration())
        let table = tableName()
        defer {
            try? admin.execute("DROP TABLE IF EXISTS \(table)")
            db.close()
            admin.close()
        }
        try admin.execute("CREATE TABLE \(table) (id int PRIMARY KEY, a text); INSERT INTO \(table) VALUES (1, 'x')")
        func select() throws -> PostgresResult { try db.query("SELECT * FROM \(unescaped: table) WHERE id = \(1)") }
        #expect(try select().columns == ["id", "a"])

        try admin.execute("ALTER TABLE \(table) ADD COLUMN b text DEFAULT 'y'")
        let after = try select()
        #expect(after.columns == ["id", "a", "b"])
        #expect(after.rows.first?["b"] == "y")

        // Inside a transaction the failed statement has aborted it: the error reaches the caller,
        // and the next call runs on a statement prepared again.
        try admin.execute("ALTER TABLE \(table) ADD COLUMN c text DEFAULT 'z'")
        let error = try #require(throws: PostgresError.self) { try db.transaction { _ in try select() } }
        #expect(error.sqlState == "0A000")
        #expect(try select().columns == ["id", "a", "b", "c"])
    }

    @Test("Past its capacity a session runs statements unprepared")
    func capacityBoundsASession() throws {
        let db = try PostgresConnection(configuration: configuration())
        defer { db.close() }
        for index in 0..<(PreparedStatements.capacity + 5) {
            // A different text each time, as a statement with a list spliced in would be.
            let query = PostgresQuery(unsafeSQL: "SELECT \(index) + $1::int AS n", binds: ["1"])
            #expect(try db.query(query).rows.first?.int("n") == index + 1)
        }
        #expect(try preparedStatements(db).count == PreparedStatements.capacity)
    }
}
