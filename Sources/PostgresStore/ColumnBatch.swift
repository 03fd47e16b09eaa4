/// The columns of a batch of rows, each sent as one array parameter for `unnest`: one statement
/// writes the whole batch, whatever its size.
struct ColumnBatch {
    private var columns: [[String?]]

    /// A batch of rows with `columns` values each.
    init(columns: Int) { self.columns = Array(repeating: [], count: columns) }

    /// Adds a row; it must have one value per column (nil is SQL NULL).
    mutating func append(_ row: [String?]) {
        precondition(row.count == columns.count, "a row must have one value per column")
        for (index, value) in row.enumerated() { columns[index].append(value) }
    }

    /// Whether no row was added.
    var isEmpty: Bool { columns.first?.isEmpty ?? true }

    /// Column `index` as a Postgres array literal.
    subscript(_ index: Int) -> String { PostgresArray.literal(columns[index]) }
}
