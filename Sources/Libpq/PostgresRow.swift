#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// One row of a ``PostgresResult``, as PostgreSQL's text-format values.
///
/// ```swift
/// for row in try db.query("SELECT id, created_at FROM receipts").rows {
///     let id = row.uuid("id")
///     let created = row.date("created_at")
/// }
/// ```
///
/// Subscripts and getters return `nil` both for SQL `NULL` and for an unknown column or index;
/// typed getters also return `nil` when the text does not parse as that type.
public struct PostgresRow: Sendable {
    /// Column name → index, shared by all rows of a result (copy-on-write, so not copied).
    let columnIndex: [String: Int]
    let values: [String?]

    /// The text value of the named column, or `nil` for `NULL` or an unknown name.
    ///
    /// - Parameter column: The column name as the query labels it; with duplicate names, the first wins.
    public subscript(_ column: String) -> String? {
        columnIndex[column].flatMap { self[$0] }
    }

    /// The text value at a zero-based column position, or `nil` for `NULL` or an index out of range.
    ///
    /// - Parameter index: Zero-based column position.
    public subscript(_ index: Int) -> String? {
        values.indices.contains(index) ? values[index] : nil
    }

    /// The named column as text.
    ///
    /// - Parameter column: Column name.
    /// - Returns: The value, or `nil` for `NULL`.
    public func string(_ column: String) -> String? { self[column] }

    /// The named column as an integer (`int2`, `int4`, `int8`, or numeric text).
    ///
    /// - Parameter column: Column name.
    /// - Returns: The value, or `nil` for `NULL` or non-integer text.
    public func int(_ column: String) -> Int? { self[column].flatMap { Int($0) } }

    /// The named column as a `Double` (`float4`, `float8`, `numeric`).
    ///
    /// - Parameter column: Column name.
    /// - Returns: The value, or `nil` for `NULL` or non-numeric text.
    public func double(_ column: String) -> Double? {
        switch self[column] {
        case "Infinity": .infinity
        case "-Infinity": -.infinity
        case "NaN": .nan
        case let text?: Double(text)
        case nil: nil
        }
    }

    /// The named column as a `Bool` (PostgreSQL prints `t`/`f`).
    ///
    /// - Parameter column: Column name.
    /// - Returns: The value, or `nil` for `NULL` or other text.
    public func bool(_ column: String) -> Bool? {
        switch self[column] {
        case "t", "true": true
        case "f", "false": false
        default: nil
        }
    }

    /// The named column as a `UUID`.
    ///
    /// - Parameter column: Column name.
    /// - Returns: The value, or `nil` for `NULL` or malformed text.
    public func uuid(_ column: String) -> UUID? { self[column].flatMap { Self.parseUUID($0) ?? UUID(uuidString: $0) } }

    /// Postgres's own `uuid` output (36 characters, lower-case hex), read without `sscanf`, which
    /// `UUID(uuidString:)` uses (1 % of a worker's CPU at ~60 ids a batch); anything else is nil.
    static func parseUUID(_ text: String) -> UUID? {
        var text = text
        return text.withUTF8 { utf8 -> UUID? in
            guard utf8.count == 36 else { return nil }
            var bytes: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            let parsed = withUnsafeMutableBytes(of: &bytes) { out -> Bool in
                var at = 0
                for index in 0..<16 {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        guard utf8[at] == UInt8(ascii: "-") else { return false }
                        at += 1
                    }
                    guard let high = hexDigit(utf8[at]), let low = hexDigit(utf8[at + 1]) else { return false }
                    out[index] = high << 4 | low
                    at += 2
                }
                return true
            }
            return parsed ? UUID(uuid: bytes) : nil
        }
    }

    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte &- UInt8(ascii: "a") &+ 10
        default: nil
        }
    }

    /// The named column as a `Date`, from `timestamptz` (or `timestamp`/`date`, read as UTC) text
    /// such as `2026-11-21 10:41:14.123+00`.
    ///
    /// - Parameter column: Column name.
    /// - Returns: The value (`infinity` maps to `Date.distantFuture`), or `nil` for `NULL` or other text.
    public func date(_ column: String) -> Date? { self[column].flatMap(PostgresTimestamp.parse) }

    /// The named column as bytes, from `bytea` in hex output format (`\x00ff`, the default).
    ///
    /// - Parameter column: Column name.
    /// - Returns: The bytes, or `nil` for `NULL` or text that is not hex `bytea`.
    public func bytes(_ column: String) -> [UInt8]? { self[column].flatMap(Self.decodeHexBytea) }

    private static func decodeHexBytea(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x"), utf8.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity((utf8.count - 2) / 2)
        var index = 2
        while index < utf8.count {
            guard let high = hexValue(utf8[index]), let low = hexValue(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func hexValue(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// The outcome of a statement: its rows (empty for commands) and how many rows it affected.
public struct PostgresResult: Sendable {
    /// The returned rows, in order.
    public var rows: [PostgresRow]
    /// Rows inserted, updated, deleted, selected… as the command tag reports; 0 when it reports none.
    public var affectedRows: Int
    /// The column names, in order.
    public var columns: [String]
}
