#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A SQL statement whose interpolated values become `$n` parameters.
///
/// Interpolation never splices a value into the SQL text, so it cannot inject SQL (the idea of
/// postgres-nio's `PostgresQuery`). Values are sent in text format, a ``PostgresBinaryArray`` in
/// binary; `nil` becomes SQL `NULL`.
///
/// ```swift
/// let query: PostgresQuery = "SELECT * FROM receipts WHERE id = \(id) AND status = \(status)"
/// // sql: "SELECT * FROM receipts WHERE id = $1 AND status = $2", binds: [id, status]
/// let table = "receipts_2026"
/// let count: PostgresQuery = "SELECT count(*) FROM \(unescaped: table)"  // identifiers you control
/// ```
public struct PostgresQuery: ExpressibleByStringInterpolation, Sendable {
    /// The SQL text with `$1`, `$2`, … placeholders.
    public var sql: String
    /// The parameter values in placeholder order; `nil` is `NULL`.
    public var binds: [PostgresBind?]

    /// Creates a query from SQL you wrote with explicit `$n` placeholders.
    ///
    /// - Parameters:
    ///   - unsafeSQL: SQL text; nothing in it is escaped, so never build it from input.
    ///   - binds: Values for `$1`, `$2`, …; `nil` is `NULL`.
    public init(unsafeSQL: String, binds: [PostgresBind?] = []) {
        self.sql = unsafeSQL
        self.binds = binds
    }

    /// Creates a query with no parameters from a string literal.
    ///
    /// - Parameter value: The SQL text.
    public init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    /// Creates a query from an interpolated literal; see ``StringInterpolation``.
    ///
    /// - Parameter stringInterpolation: The collected SQL text and binds.
    public init(stringInterpolation: StringInterpolation) {
        self.init(unsafeSQL: stringInterpolation.sql, binds: stringInterpolation.binds)
    }

    /// Collects literal SQL and turns each interpolated value into the next `$n` parameter.
    public struct StringInterpolation: StringInterpolationProtocol, Sendable {
        var sql = ""
        var binds: [PostgresBind?] = []

        /// Reserves space for the literal text.
        ///
        /// - Parameters:
        ///   - literalCapacity: Characters of literal SQL.
        ///   - interpolationCount: Number of interpolations.
        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
            binds.reserveCapacity(interpolationCount)
        }

        /// Appends literal SQL text.
        ///
        /// - Parameter literal: SQL from the source code.
        public mutating func appendLiteral(_ literal: String) {
            sql += literal
        }

        /// Binds a value as the next `$n` parameter.
        ///
        /// - Parameter value: The value; see ``PostgresBindable`` for the supported types.
        public mutating func appendInterpolation<Value: PostgresBindable>(_ value: Value) {
            bind(value.postgresText)
        }

        /// Binds an optional value as the next `$n` parameter; `nil` is SQL `NULL`.
        ///
        /// - Parameter value: The value or `nil`.
        public mutating func appendInterpolation<Value: PostgresBindable>(_ value: Value?) {
            bind(value?.postgresText)
        }

        /// Binds an array as the next `$n` parameter, in binary format.
        ///
        /// - Parameter array: The array; the statement must cast the parameter to its type.
        public mutating func appendInterpolation(_ array: PostgresBinaryArray) {
            binds.append(.array(array))
            sql += "$\(binds.count)"
        }

        /// Appends SQL text verbatim, e.g. a table name chosen by the program.
        ///
        /// - Parameter unescaped: SQL text; it is not escaped, so never pass input here.
        public mutating func appendInterpolation(unescaped: String) {
            sql += unescaped
        }

        private mutating func bind(_ text: String?) {
            binds.append(text.map(PostgresBind.text))
            sql += "$\(binds.count)"
        }
    }
}

/// One parameter's value.
public enum PostgresBind: Sendable, Equatable, ExpressibleByStringLiteral {
    /// PostgreSQL's text input format for the parameter's type.
    case text(String)
    /// An array in binary format.
    case array(PostgresBinaryArray)

    /// A text value from a string literal.
    ///
    /// - Parameter value: The text.
    public init(stringLiteral value: String) { self = .text(value) }

    /// The value if it is sent as text.
    public var text: String? {
        if case .text(let text) = self { text } else { nil }
    }
}

/// A value that can be bound as a text-format query parameter.
///
/// Conforming types: `String`, `Int`, `Int64`, `Int32`, `Bool`, `Double`, `UUID`, `Date`
/// (ISO 8601 UTC, millisecond precision) and `[UInt8]` (`bytea`).
public protocol PostgresBindable: Sendable {
    /// The value in PostgreSQL's text input format.
    var postgresText: String { get }
}

extension String: PostgresBindable {
    /// The string itself.
    public var postgresText: String { self }
}

extension Int: PostgresBindable {
    /// Decimal digits.
    public var postgresText: String { String(self) }
}

extension Int64: PostgresBindable {
    /// Decimal digits.
    public var postgresText: String { String(self) }
}

extension Int32: PostgresBindable {
    /// Decimal digits.
    public var postgresText: String { String(self) }
}

extension Bool: PostgresBindable {
    /// `t` or `f`.
    public var postgresText: String { self ? "t" : "f" }
}

extension Double: PostgresBindable {
    /// Shortest round-tripping decimal; `inf`, `-inf` and `nan` are accepted by `float8`.
    public var postgresText: String { description }
}

extension UUID: PostgresBindable {
    /// The canonical 36-character form.
    public var postgresText: String { uuidString }
}

extension Date: PostgresBindable {
    /// ISO 8601 in UTC with milliseconds, e.g. `2026-11-21T10:41:14.123Z`.
    public var postgresText: String { PostgresTimestamp.format(self) }
}

extension Array: PostgresBindable where Element == UInt8 {
    /// `bytea` hex format, e.g. `\x00ff`.
    public var postgresText: String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var text: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
        text.reserveCapacity(2 + count * 2)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
