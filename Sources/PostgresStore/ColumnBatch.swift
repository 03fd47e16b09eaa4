import Libpq

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The columns of a batch of rows, each sent as one binary array parameter for `unnest`: one
/// statement writes the whole batch, whatever its size.
///
/// Binary, not array literals: Postgres's `array_in` scanning and parsing the literals back
/// (the receipts' base64 byte by byte, every date through its date parser) was 15 % of its CPU
/// per validation (bench/README "Binary arrays").
struct ColumnBatch {
    private var columns: [PostgresBinaryArray]

    /// A batch whose columns hold these element types; each must match the statement's cast of
    /// its parameter (`uuid` for `$1::uuid[]`), which the tests of every statement check.
    init(_ types: [PostgresBinaryArray.Element]) { columns = types.map { PostgresBinaryArray($0) } }

    /// Adds a row; it must have one value per column, of the column's type (nil is SQL NULL).
    mutating func append(_ row: [ColumnValue]) {
        precondition(row.count == columns.count, "a row must have one value per column")
        for (index, value) in row.enumerated() {
            switch value {
            case .text(let text): columns[index].append(text)
            case .uuid(let id): columns[index].append(id)
            case .int(let number): columns[index].append(number)
            case .bool(let flag): columns[index].append(flag)
            case .date(let date): columns[index].append(date)
            }
        }
    }

    /// Whether no row was added.
    var isEmpty: Bool { columns.first?.isEmpty ?? true }

    /// Column `index`, to interpolate into the statement.
    subscript(_ index: Int) -> PostgresBinaryArray { columns[index] }
}

/// One value of a ``ColumnBatch`` row; `nil` is SQL NULL.
enum ColumnValue {
    case text(String?)
    case uuid(UUID?)
    case int(Int?)
    case bool(Bool?)
    case date(Date?)
}
