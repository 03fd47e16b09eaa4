import Foundation
import ReceiptTesting
import SystemTesting
import Testing

@testable import Libpq

/// The libpq façade against a real PostgreSQL (`POSTGRES_*` variables).
///
/// Every test works in its own randomly named table and drops it; nothing else is touched.
@Suite("Libpq façade", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct LibpqTests {
    let configuration = PostgresConfiguration(
        host: TestEnvironment.postgresHost,
        port: TestEnvironment.postgresPort,
        user: TestEnvironment.postgresUser,
        password: TestEnvironment.postgresPassword,
        database: TestEnvironment.postgresDatabase
    )

    /// A table name unique to this test run; safe to splice with `unescaped:`.
    func tableName() -> String {
        "receiptq_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
    }

    @Test func connectsInUTC() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let result = try db.query("SELECT 1 AS one, current_setting('TimeZone') AS zone, current_setting('application_name') AS app")
        #expect(result.columns == ["one", "zone", "app"])
        #expect(result.rows.count == 1)
        #expect(result.rows.first?["one"] == "1")
        #expect(result.rows.first?[0] == "1")
        #expect(result.rows.first?.int("one") == 1)
        #expect(result.rows.first?["zone"] == "UTC")
        #expect(result.rows.first?["app"] == "receiptq")
        #expect(result.rows.first?["missing"] == nil)
        #expect(result.rows.first?[7] == nil)
    }

    @Test func everyBindTypeRoundTrips() throws {
        let db = try PostgresConnection(configuration: configuration)
        let table = tableName()
        defer {
            try? db.execute("DROP TABLE IF EXISTS \(table)")
            db.close()
        }
        try db.execute(
            """
            CREATE TABLE \(table) (
                n serial PRIMARY KEY, s text, i int8, i64 int8, i32 int4, b bool, d float8,
                u uuid, t timestamptz, raw bytea
            )
            """
        )
        let text = "reçu ✓ 🧾 'single' \"double\" \\ backslash $1 \r\n end"
        let id = UUID()
        let when = Date(timeIntervalSince1970: 1_763_721_674.123)
        let bytes: [UInt8] = [0x00, 0xFF, 0x5C, 0x27, 0x0A, 0x00, 0x78]
        let inserted = try db.query(
            """
            INSERT INTO \(unescaped: table) (s, i, i64, i32, b, d, u, t, raw)
            VALUES (\(text), \(Int.max), \(Int64.min), \(Int32.min), \(true), \(3.25), \(id), \(when), \(bytes))
            """
        )
        #expect(inserted.affectedRows == 1)
        let row = try #require(try db.query("SELECT * FROM \(unescaped: table)").rows.first)
        #expect(row.string("s") == text)
        #expect(row.int("i") == Int.max)
        #expect(row.int("i64") == Int(Int64.min))
        #expect(row.int("i32") == Int(Int32.min))
        #expect(row.bool("b") == true)
        #expect(row.double("d") == 3.25)
        #expect(row.uuid("u") == id)
        let storedDate = try #require(row.date("t"))
        #expect(abs(storedDate.timeIntervalSince1970 - when.timeIntervalSince1970) < 0.0005)
        #expect(row["t"] == "2025-11-21 10:41:14.123+00")
        #expect(row.bytes("raw") == bytes)

        // Optionals: nil becomes SQL NULL for every type.
        let noText: String? = nil
        let noInt: Int? = nil
        let noInt64: Int64? = nil
        let noInt32: Int32? = nil
        let noBool: Bool? = nil
        let noDouble: Double? = nil
        let noUUID: UUID? = nil
        let noDate: Date? = nil
        let noBytes: [UInt8]? = nil
        try db.query(
            """
            INSERT INTO \(unescaped: table) (s, i, i64, i32, b, d, u, t, raw)
            VALUES (\(noText), \(noInt), \(noInt64), \(noInt32), \(noBool), \(noDouble), \(noUUID), \(noDate), \(noBytes))
            """
        )
        let nulls = try #require(try db.query("SELECT * FROM \(unescaped: table) WHERE s IS NULL").rows.first)
        for column in ["s", "i", "i64", "i32", "b", "d", "u", "t", "raw"] {
            #expect(nulls[column] == nil, "\(column) should be NULL")
        }
        #expect(nulls.int("n") == 2)

        // Some and empty values are not NULL.
        let someText: String? = ""
        let emptyBytes: [UInt8] = []
        let empty = try #require(try db.query("SELECT \(someText)::text AS s, \(emptyBytes)::bytea AS raw, \(false) AS f").rows.first)
        #expect(empty["s"] == "")
        #expect(empty.bytes("raw") == [])
        #expect(empty.bool("f") == false)
    }

    @Test("Dates are printed as a UTC Gregorian calendar reads them, to the nearest millisecond")
    func printsDatesLikeTheCalendar() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        // 1900 to 2100 with fractions, year 4001, and a millisecond that rounds into the next
        // second. (Not before 1582: Foundation's Gregorian calendar is Julian there, Postgres's is not.)
        let dates =
            (0..<2_000).map { _ in Date(timeIntervalSince1970: Double.random(in: -2_208_988_800...4_102_444_800)) }
            + [.distantFuture, Date(timeIntervalSince1970: -0.0004), Date(timeIntervalSince1970: 59.9996)]
        for date in dates {
            let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded())
            let whole = Date(timeIntervalSince1970: Double(milliseconds - ((milliseconds % 1000) + 1000) % 1000) / 1000)
            let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: whole)
            let expected = String(
                format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!,
                Int(((milliseconds % 1000) + 1000) % 1000))
            #expect(PostgresTimestamp.format(date) == expected, "\(date.timeIntervalSince1970)")
        }
    }

    @Test("A date beyond Postgres's years 1–9999, or not a number, is stored as ±infinity instead of trapping")
    func storesNonsenseDatesAsInfinity() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let cases: [(Date, Date)] = [
            (Date(timeIntervalSince1970: 1e297), .distantFuture), (Date(timeIntervalSince1970: .infinity), .distantFuture),
            (Date(timeIntervalSince1970: 253_402_300_799.9996), .distantFuture), (Date(timeIntervalSince1970: -1e297), .distantPast),
            (Date(timeIntervalSince1970: -.infinity), .distantPast), (Date(timeIntervalSince1970: .nan), .distantPast),
        ]
        for (date, expected) in cases {
            let row = try #require(try db.query("SELECT \(date)::timestamptz AS t").rows.first)
            #expect(row.date("t") == expected, "\(date.timeIntervalSince1970)")
        }
        // The last millisecond of the year 9999 is still a date.
        #expect(PostgresTimestamp.format(Date(timeIntervalSince1970: 253_402_300_799.999)) == "9999-12-31T23:59:59.999Z")
    }

    @Test("Ids read back as Foundation reads them: Postgres's lower-case form fast, any other form through UUID(uuidString:)")
    func readsUUIDsLikeFoundation() throws {
        for _ in 0..<1_000 {
            let id = UUID()
            let text = id.uuidString.lowercased()
            #expect(PostgresRow.parseUUID(text) == id)
            // One byte changed at each position: the fast reader takes exactly what Foundation takes.
            var bytes = Array(text.utf8)
            let at = Int.random(in: 0..<bytes.count)
            bytes[at] = [UInt8(ascii: "g"), UInt8(ascii: "-"), UInt8(ascii: "0"), UInt8(ascii: "F"), 0].randomElement()!
            let mutated = String(decoding: bytes, as: UTF8.self)
            if let fast = PostgresRow.parseUUID(mutated) { #expect(fast == UUID(uuidString: mutated)) }
        }
        #expect(PostgresRow.parseUUID(String(UUID().uuidString.lowercased().dropLast())) == nil)
        #expect(PostgresRow.parseUUID(UUID().uuidString.lowercased() + "0") == nil)

        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let id = UUID()
        let row = try #require(
            try db.query("SELECT \(id)::uuid AS u, \(id.uuidString)::text AS upper, \("not-a-uuid")::text AS bad").rows.first)
        #expect(row.uuid("u") == id)
        #expect(row.uuid("upper") == id)
        #expect(row.uuid("bad") == nil)
    }

    @Test func parsesServerTimestampFormats() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let row = try #require(
            try db.query(
                """
                SELECT '2026-11-21 10:41:14.123+05:30'::timestamptz AS offset_ms,
                       '2026-11-21 10:41:14'::timestamp AS naive,
                       '2026-11-21'::date AS day,
                       '1969-12-31 23:59:59.5+00'::timestamptz AS before_epoch,
                       'infinity'::timestamptz AS forever,
                       '2026-11-21 10:41:14.123456-08:00'::text AS micro_text,
                       'not a date'::text AS junk
                """
            ).rows.first
        )
        // 10:41:14.123 at +05:30 is 05:11:14.123 UTC; the session prints it in UTC.
        #expect(row["offset_ms"] == "2026-11-21 05:11:14.123+00")
        #expect(row.date("offset_ms") == Date(timeIntervalSince1970: 1_795_237_874.123))
        #expect(row.date("naive") == Date(timeIntervalSince1970: 1_795_257_674))
        #expect(row.date("day") == Date(timeIntervalSince1970: 1_795_219_200))
        #expect(row.date("before_epoch") == Date(timeIntervalSince1970: -0.5))
        #expect(row.date("forever") == Date.distantFuture)
        let micro = try #require(row.date("micro_text"))
        #expect(abs(micro.timeIntervalSince1970 - 1_795_286_474.123456) < 0.000_001)
        #expect(row.date("junk") == nil)

        // Binding a Date and reading it back through the server's parser agrees to the millisecond.
        let date = Date(timeIntervalSince1970: 1_795_237_874.987)
        let echoed = try #require(try db.query("SELECT \(date)::timestamptz AS t, \(date)::timestamptz::text AS s").rows.first)
        #expect(echoed["s"] == "2026-11-21 05:11:14.987+00")
        #expect(echoed.date("t").map { abs($0.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.0005 } == true)
    }

    @Test func interpolationCannotInjectSQL() throws {
        let db = try PostgresConnection(configuration: configuration)
        let table = tableName()
        defer {
            try? db.execute("DROP TABLE IF EXISTS \(table)")
            db.close()
        }
        try db.execute("CREATE TABLE \(table) (name text NOT NULL)")
        let attack = "'); DROP TABLE \(table); --"
        let query: PostgresQuery = "INSERT INTO \(unescaped: table) (name) VALUES (\(attack))"
        #expect(query.sql == "INSERT INTO \(table) (name) VALUES ($1)")
        #expect(query.binds == [.text(attack)])
        try db.query(query)
        let rows = try db.query("SELECT name FROM \(unescaped: table)").rows
        #expect(rows.map { $0["name"] } == [attack])
        #expect(try db.query("SELECT to_regclass(\(table)) IS NOT NULL AS present").rows.first?.bool("present") == true)
    }

    @Test func uniqueViolationMapsToItsCode() throws {
        let db = try PostgresConnection(configuration: configuration)
        let table = tableName()
        defer {
            try? db.execute("DROP TABLE IF EXISTS \(table)")
            db.close()
        }
        try db.execute("CREATE TABLE \(table) (id text PRIMARY KEY)")
        let key = "transaction-id-\(UUID().uuidString)"
        try db.query("INSERT INTO \(unescaped: table) (id) VALUES (\(key))")
        let error = try #require(throws: PostgresError.self) {
            try db.query("INSERT INTO \(unescaped: table) (id) VALUES (\(key))")
        }
        #expect(error.code == .uniqueViolation)
        #expect(error.sqlState == "23505")
        #expect(error.code.description == "uniqueViolation")
        #expect(error.message.contains("duplicate key"))
        #expect(error.constraint == "\(table)_pkey")
        #expect(!error.isTransient)
        // The key is in the server's DETAIL, which is never surfaced.
        #expect(!String(describing: error).contains(key))
        // The connection stays usable after a statement error.
        #expect(try db.query("SELECT count(*) AS n FROM \(unescaped: table)").rows.first?.int("n") == 1)
    }

    @Test func sqlStatesMapToCodesAndTransience() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        func raise(_ sqlState: String) throws -> PostgresError {
            try #require(throws: PostgresError.self) {
                try db.execute("DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '\(sqlState)'; END $$")
            }
        }
        let serialization = try raise("40001")
        #expect(serialization.code == .serializationFailure)
        #expect(serialization.isTransient)
        let deadlock = try raise("40P01")
        #expect(deadlock.code == .deadlock)
        #expect(deadlock.isTransient)
        let adminShutdown = try raise("57P01")
        #expect(adminShutdown.code == .query)
        #expect(adminShutdown.isTransient)
        let connectionException = try raise("08006")
        #expect(connectionException.isTransient)
        let syntax = try #require(throws: PostgresError.self) { try db.execute("SELEC 1") }
        #expect(syntax.code == .query)
        #expect(syntax.sqlState == "42601")
        #expect(!syntax.isTransient)
    }

    @Test func errorDescriptionsNeverContainBoundValues() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let secret = "shared-secret-\(UUID().uuidString)"
        let error = try #require(throws: PostgresError.self) { try db.query("SELECT \(secret)::int AS n") }
        #expect(error.sqlState == "22P02")
        #expect(error.message.contains("invalid input syntax"))
        #expect(!String(describing: error).contains(secret))
        #expect(!error.message.contains(secret))

        let short = "abc"
        let shortError = try #require(throws: PostgresError.self) { try db.query("SELECT \(short)::uuid") }
        #expect(!String(describing: shortError).contains("\"abc\""))

        // A NUL byte cannot travel as a text parameter; it fails before reaching the server.
        let nul = try #require(throws: PostgresError.self) { try db.query("SELECT \("a\u{0}b")::text") }
        #expect(nul.sqlState == "22021")
        #expect(try db.query("SELECT 1 AS one").rows.first?.int("one") == 1)
    }

    @Test("A bad element of an array parameter (a batched column) is not in the error either")
    func errorDescriptionsNeverContainArrayElements() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        // The batched writes bind each column as one array; the server quotes only the element it
        // could not read, which is no bind as a whole.
        let element = "MIIT-receipt-\(UUID().uuidString)"
        let uuids = try #require(throws: PostgresError.self) {
            try db.query("SELECT \("{\"\(UUID().uuidString)\",\"\(element)\"}")::uuid[]")
        }
        #expect(uuids.sqlState == "22P02")
        #expect(uuids.message.hasPrefix("invalid input syntax for type uuid"))
        #expect(!String(describing: uuids).contains(element))
        #expect(!String(describing: uuids).contains("MIIT"))

        let big = "9\(Int.random(in: 100_000_000_000...999_999_999_999))"
        let range = try #require(throws: PostgresError.self) { try db.query("SELECT \("{1,\(big)}")::int[]") }
        #expect(range.sqlState == "22003")
        #expect(!String(describing: range).contains(big))
    }

    @Test func transactionCommitsOrRollsBack() throws {
        struct Abort: Error {}
        let db = try PostgresConnection(configuration: configuration)
        let table = tableName()
        defer {
            try? db.execute("DROP TABLE IF EXISTS \(table)")
            db.close()
        }
        try db.execute("CREATE TABLE \(table) (v int NOT NULL)")
        func values() throws -> [Int] {
            try db.query("SELECT v FROM \(unescaped: table) ORDER BY v").rows.compactMap { $0.int("v") }
        }

        #expect(throws: Abort.self) {
            try db.transaction { db in
                try db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(1))")
                throw Abort()
            }
        }
        #expect(try values() == [])

        let returned = try db.transaction { db in
            try db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(2))")
            // A nested transaction is a savepoint: its failure undoes only its own work.
            _ = try? db.transaction { db -> Int in
                try db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(3))")
                throw Abort()
            }
            try db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(4))")
            return "done"
        }
        #expect(returned == "done")
        #expect(try values() == [2, 4])

        // A statement error swallowed inside aborts the transaction; COMMIT must not look like success.
        let aborted = try #require(throws: PostgresError.self) {
            try db.transaction { db in
                try db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(5))")
                _ = try? db.query("SELECT 1/0")
            }
        }
        #expect(aborted.sqlState == "25P02")
        #expect(try values() == [2, 4])
    }

    @Test func connectFailureIsQuickAndTransient() throws {
        var closed = configuration
        closed.port = 1
        let start = ContinuousClock.now
        let error = try #require(throws: PostgresError.self) { try PostgresConnection(configuration: closed) }
        #expect(error.code == .connectionFailed)
        #expect(error.isTransient)
        #expect(ContinuousClock.now - start < .seconds(2))

        var wrongDatabase = configuration
        wrongDatabase.database = "receiptq_no_such_db_\(UUID().uuidString.prefix(8))"
        let missing = try #require(throws: PostgresError.self) { try PostgresConnection(configuration: wrongDatabase) }
        #expect(missing.code == .connectionFailed)
        #expect(missing.message.contains("does not exist"))
    }

    @Test func passwordNeverAppearsInDescriptions() throws {
        var withPassword = configuration
        withPassword.password = "pw with 'quotes' and spaces host=evil-\(UUID().uuidString)"
        #expect(!withPassword.description.contains("evil"))
        #expect(withPassword.description.contains("<redacted>"))
        // Trust auth ignores the password; the quotes and spaces must not break the connection.
        let db = try PostgresConnection(configuration: withPassword)
        defer { db.close() }
        #expect(try db.query("SELECT current_user AS u").rows.first?["u"] == configuration.user)
    }

    @Test func recoversAfterBackendIsTerminatedMidCall() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let pid = try #require(try db.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid"))

        // The session ends during the call: that call fails, transiently…
        let error = try #require(throws: PostgresError.self) { try db.query("SELECT pg_terminate_backend(pg_backend_pid())") }
        #expect(error.code == .connectionLost)
        #expect(error.isTransient)
        // …and the next one runs on a fresh backend with the session set up again. (A session
        // ended while idle costs no failed call: LibpqRecoveryTests.)
        let row = try #require(try db.query("SELECT pg_backend_pid() AS pid, current_setting('TimeZone') AS zone").rows.first)
        #expect(row.int("pid") != pid)
        #expect(row["zone"] == "UTC")
    }

    @Test func connectionLostInsideTransactionDoesNotReconnect() throws {
        let db = try PostgresConnection(configuration: configuration)
        let admin = try PostgresConnection(configuration: configuration)
        let table = tableName()
        defer {
            try? admin.execute("DROP TABLE IF EXISTS \(table)")
            db.close()
            admin.close()
        }
        try db.execute("CREATE TABLE \(table) (v int)")
        #expect(throws: PostgresError.connectionLost) {
            try db.transaction { db in
                try db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(1))")
                let pid = try db.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid") ?? 0
                _ = try admin.query("SELECT pg_terminate_backend(\(pid))")
                _ = try? db.query("SELECT 1")  // fails: connection lost
                // Must not run on a new session outside the transaction.
                try db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(2))")
            }
        }
        #expect(try db.query("SELECT count(*) AS n FROM \(unescaped: table)").rows.first?.int("n") == 0)
    }

    @Test func asyncQueryAndNestedCallsOnTheQueue() async throws {
        let db = try PostgresConnection(configuration: configuration)
        let table = tableName()
        defer {
            try? db.execute("DROP TABLE IF EXISTS \(table)")
            db.close()
        }
        try await db.query("CREATE TABLE \(unescaped: table) (v int)")
        let inserted = try await db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(1)), (\(2)), (\(3))")
        #expect(inserted.affectedRows == 3)
        // Blocking calls and a transaction inside withConnection run inline on the queue (no deadlock).
        let total = try await db.withConnection { db in
            try db.transaction { db in
                try db.query("UPDATE \(unescaped: table) SET v = v * 10")
                return try db.query("SELECT sum(v) AS total FROM \(unescaped: table)").rows.first?.int("total")
            }
        }
        #expect(total == 60)
        let deleted = try await db.query("DELETE FROM \(unescaped: table) WHERE v > \(15)")
        #expect(deleted.affectedRows == 2)
    }

    @Test func executeRunsMultipleStatementsAndNoticesStayOffStderr() throws {
        let db = try PostgresConnection(configuration: configuration)
        let table = tableName()
        defer {
            try? db.execute("DROP TABLE IF EXISTS \(table)")
            db.close()
        }
        // DROP … IF EXISTS on a missing table sends a NOTICE, which goes to the logger, not stderr.
        try db.execute(
            """
            DROP TABLE IF EXISTS \(table);
            CREATE TABLE \(table) (v int);
            INSERT INTO \(table) VALUES (1), (2);
            """
        )
        #expect(try db.query("SELECT count(*) AS n FROM \(unescaped: table)").rows.first?.int("n") == 2)
    }

    @Test func closedConnectionThrowsClosed() throws {
        let db = try PostgresConnection(configuration: configuration)
        db.close()
        db.close()
        #expect(throws: PostgresError.closed) { try db.query("SELECT 1") }
    }

    @Test func poolRunsConcurrentWorkOnAtMostSizeConnections() async throws {
        let pool = PostgresConnectionPool(configuration: configuration, size: 3)
        defer { pool.close() }
        let pids = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<20 {
                group.addTask {
                    try await pool.withConnection { db in
                        let row = try db.query("SELECT pg_backend_pid() AS pid, \(index)::int AS i, pg_sleep(0.01)").rows.first
                        guard row?.int("i") == index else { return -1 }
                        return row?.int("pid") ?? -1
                    }
                }
            }
            var pids: [Int] = []
            for try await pid in group { pids.append(pid) }
            return pids
        }
        #expect(pids.count == 20)
        #expect(!pids.contains(-1))
        #expect(Set(pids).count <= 3)
    }

    @Test func poolRollsBackATransactionLeftOpen() async throws {
        let pool = PostgresConnectionPool(configuration: configuration, size: 1)
        let table = tableName()
        try await pool.withConnection { try $0.execute("CREATE TABLE \(table) (v int)") }
        try await pool.withConnection { db in
            try db.execute("BEGIN")
            try db.query("INSERT INTO \(unescaped: table) (v) VALUES (\(1))")
        }
        let count = try await pool.withConnection { db in
            try db.query("SELECT count(*) AS n FROM \(unescaped: table)").rows.first?.int("n")
        }
        #expect(count == 0)
        try await pool.withConnection { try $0.execute("DROP TABLE \(table)") }
        pool.close()
        await #expect(throws: PostgresError.closed) { try await pool.withConnection { _ in 1 } }
    }
}
