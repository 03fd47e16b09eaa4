import Foundation
import ReceiptTesting
import SystemTesting
import Testing

@testable import Libpq

@Suite("Libpq queries", .blockingWork)
struct PostgresQueryTests {
    @Test func interpolationBindsEveryValue() {
        let id = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F") ?? UUID()
        let missing: Int? = nil
        let query: PostgresQuery = """
            SELECT * FROM \(unescaped: "receipts") WHERE id = \(id) AND n = \(42) AND ok = \(false) \
            AND x IS \(missing) AND raw = \([UInt8]([0x00, 0xAB])) AND d = \(Date(timeIntervalSince1970: 0.5))
            """
        #expect(query.sql == "SELECT * FROM receipts WHERE id = $1 AND n = $2 AND ok = $3 AND x IS $4 AND raw = $5 AND d = $6")
        #expect(query.binds == ["E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "42", "f", nil, "\\x00ab", "1970-01-01T00:00:00.500Z"])
        let literal: PostgresQuery = "SELECT 1"
        #expect(literal.sql == "SELECT 1" && literal.binds.isEmpty)
    }

    @Test func errorsCompareByCode() {
        #expect(PostgresError.uniqueViolation == PostgresError.uniqueViolation)
        #expect(PostgresError.uniqueViolation != PostgresError.query)
        #expect(PostgresError.connectionLost.isTransient)
        #expect(!PostgresError.closed.isTransient)
    }
}

/// `PostgresError.scrub` alone: no server needed.
@Suite("Postgres error redaction", .blockingWork)
struct PostgresErrorScrubTests {
    @Test("Data exceptions lose everything they quote, even a value with quotes or a line break")
    func scrubOfQuotedValues() {
        func scrub(_ message: String) -> String { PostgresError.scrub(message, binds: [], sqlState: "22P02") }
        #expect(scrub(#"invalid input syntax for type uuid: "secret""#) == #"invalid input syntax for type uuid: "<redacted>""#)
        #expect(scrub(#"value "12345678901" is out of range for type integer"#) == #"value "<redacted>" is out of range for type integer"#)
        #expect(scrub(#"invalid input syntax for type uuid: "a"b"c""#) == #"invalid input syntax for type uuid: "<redacted>""#)
        // The first line of a message whose value holds a line break has no closing quote.
        #expect(scrub(#"invalid input syntax for type integer: "secret"#) == #"invalid input syntax for type integer: "<redacted>""#)
        // Other classes quote identifiers, which stay.
        #expect(
            PostgresError.scrub(#"duplicate key value violates unique constraint "receipts_pkey""#, binds: [], sqlState: "23505")
                == #"duplicate key value violates unique constraint "receipts_pkey""#)
    }
}
