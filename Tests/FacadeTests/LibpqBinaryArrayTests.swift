import Foundation
import ReceiptTesting
import SystemTesting
import Testing

@testable import Libpq

/// Arrays bound in binary format: Postgres reads back every element as it went in, stores the
/// same instant a text bind of the date stores, and a value it cannot hold fails the statement,
/// never the process.
@Suite("Libpq binary arrays", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct LibpqBinaryArrayTests {
    let configuration = PostgresConfiguration(
        host: TestEnvironment.postgresHost, port: TestEnvironment.postgresPort, user: TestEnvironment.postgresUser,
        password: TestEnvironment.postgresPassword, database: TestEnvironment.postgresDatabase)

    @Test func everyElementTypeRoundTrips() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let texts: [String?] = [
            "plain", "", nil, "NULL", #"a "quoted" word"#, #"back\slash"#, "{braces},commas", "ünïcødé ✓", "line\nbreak\ttab",
            String(repeating: "base64+/=", count: 1_000),
        ]
        let ids: [UUID?] = [UUID(), nil, UUID(uuidString: "00000000-0000-0000-0000-000000000000"), UUID()]
        let ints: [Int?] = [0, -1, nil, Int(Int32.max), Int(Int32.min), 42]
        let bigs: [Int?] = [Int.max, Int.min, nil, 7]
        let flags: [Bool?] = [true, false, nil]
        var text = PostgresBinaryArray(.text)
        for value in texts { text.append(value) }
        var uuid = PostgresBinaryArray(.uuid)
        for value in ids { uuid.append(value) }
        var int4 = PostgresBinaryArray(.int4)
        for value in ints { int4.append(value) }
        var int8 = PostgresBinaryArray(.int8)
        for value in bigs { int8.append(value) }
        var bool = PostgresBinaryArray(.bool)
        for value in flags { bool.append(value) }

        let textRows = try db.query("SELECT v FROM unnest(\(text)::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n").rows
        #expect(textRows.map { $0["v"] } == texts)
        let idRows = try db.query("SELECT v FROM unnest(\(uuid)::uuid[]) WITH ORDINALITY AS u(v, n) ORDER BY n").rows
        #expect(idRows.map { $0.uuid("v") } == ids)
        let intRows = try db.query("SELECT v FROM unnest(\(int4)::int[]) WITH ORDINALITY AS u(v, n) ORDER BY n").rows
        #expect(intRows.map { $0.int("v") } == ints)
        let bigRows = try db.query("SELECT v FROM unnest(\(int8)::bigint[]) WITH ORDINALITY AS u(v, n) ORDER BY n").rows
        #expect(bigRows.map { $0.int("v") } == bigs)
        let boolRows = try db.query("SELECT v FROM unnest(\(bool)::boolean[]) WITH ORDINALITY AS u(v, n) ORDER BY n").rows
        #expect(boolRows.map { $0.bool("v") } == flags)

        // Empty arrays are arrays with no dimension, as Postgres writes them.
        let empty = try #require(try db.query("SELECT cardinality(\(PostgresBinaryArray(.uuid))::uuid[]) AS n").rows.first)
        #expect(empty.int("n") == 0)
    }

    @Test("A date in binary is the instant its text bind stores, infinities included")
    func datesMatchTheirTextForm() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        var dates: [Date?] = [nil, Date(), Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 946_684_800)]
        dates += (0..<500).map { _ in Date(timeIntervalSince1970: .random(in: -62_135_596_800...253_402_300_799)) }
        dates += [1e297, .infinity, -1e297, -.infinity, .nan, 253_402_300_799.9996, 1_700_000_000.0004999].map {
            Date(timeIntervalSince1970: $0)
        }
        var binary = PostgresBinaryArray(.timestamptz)
        for date in dates { binary.append(date) }
        let rows = try db.query(
            """
            SELECT b.v IS NOT DISTINCT FROM t.v AS same, b.v AS binary, t.v AS text
            FROM unnest(\(binary)::timestamptz[]) WITH ORDINALITY AS b(v, n)
            JOIN unnest(\(PostgresBinaryArray(texts: dates.map { $0.map(PostgresTimestamp.format) ?? "" }))::text[])
                 WITH ORDINALITY AS s(v, n) ON s.n = b.n
            CROSS JOIN LATERAL (SELECT NULLIF(s.v, '')::timestamptz AS v) t
            ORDER BY b.n
            """
        ).rows
        #expect(rows.count == dates.count)
        for (row, date) in zip(rows, dates) {
            #expect(row.bool("same") == true, "\(date?.timeIntervalSince1970 ?? 0): \(row["binary"] ?? "NULL") vs \(row["text"] ?? "NULL")")
        }
    }

    @Test("A number beyond int4 or a NUL in text fails the statement with the server's SQLSTATE")
    func unstorableValuesFailTheStatement() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        var big = PostgresBinaryArray(.int4)
        big.append(1)
        big.append(Int(Int32.max) + 1)
        #expect(throws: PostgresError.self) { try db.query("SELECT cardinality(\(big)::int[]) AS n") }
        do {
            _ = try db.query("SELECT cardinality(\(big)::int[]) AS n")
        } catch let error as PostgresError {
            #expect(error.sqlState == "22003")
        }
        var nul = PostgresBinaryArray(.text)
        nul.append("fine")
        nul.append("before\u{0}after")
        do {
            _ = try db.query("SELECT cardinality(\(nul)::text[]) AS n")
            Issue.record("a NUL byte was sent")
        } catch let error as PostgresError {
            #expect(error.sqlState == "22021")
        }
        // The session is fine afterwards.
        #expect(try db.query("SELECT 1 AS n").rows.first?.int("n") == 1)
    }

    @Test("An array of the wrong element type is refused by Postgres, not misread")
    func wrongElementTypeIsRefused() throws {
        let db = try PostgresConnection(configuration: configuration)
        defer { db.close() }
        let ids = PostgresBinaryArray(uuids: [UUID()])
        #expect(throws: PostgresError.self) { try db.query("SELECT cardinality(\(ids)::text[]) AS n") }
    }
}
