import Foundation
import Libpq
import ReceiptTesting
import SystemTesting
import Testing

@testable import PostgresStore

/// The array literals that carry a batch's columns: every value comes back from Postgres as it went
/// in, whatever it holds.
@Suite("Postgres array literals", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct PostgresArrayTests {
    @Test func everyValueRoundTrips() throws {
        let db = try PostgresConnection(
            configuration: PostgresConfiguration(
                host: TestEnvironment.postgresHost, port: TestEnvironment.postgresPort, user: TestEnvironment.postgresUser,
                password: TestEnvironment.postgresPassword, database: TestEnvironment.postgresDatabase))
        defer { db.close() }
        let values: [String?] = [
            "plain", "", nil, "NULL", #"a "quoted" word"#, #"back\slash"#, #"\""#, #"ends with \"#, "{braces},commas",
            "  spaces  ", "ünïcødé ✓", "line\nbreak\ttab", #"{"json":"with \"escapes\" and \\ slashes"}"#,
            String(repeating: "base64+/=", count: 1_000), "\"", "\\",
        ]
        let rows = try db.query(
            "SELECT v, v IS NULL AS missing FROM unnest(\(PostgresArray.literal(values))::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n"
        ).rows
        #expect(rows.count == values.count)
        for (row, value) in zip(rows, values) {
            #expect(row["v"] == value)
            #expect(row.bool("missing") == (value == nil))
        }
    }
}
