import Foundation
import Libpq

/// Bulk loads for rows that need millions of rows: the tables' keys, foreign keys and indexes are
/// dropped for the load and rebuilt from their own definitions afterwards (far faster than
/// maintaining every B-tree and checking every foreign key row by row).
enum BenchLoad {
    /// Runs `load` on `tables` stripped of their primary and unique keys, foreign keys (theirs and
    /// those of other tables that reference them) and other indexes, then rebuilds all of them.
    /// A partitioned table's constraints are taken on the parent only: its partitions' copies go
    /// and come back with it.
    /// - Returns: the seconds spent rebuilding.
    static func withoutKeys(_ tables: [String], on connection: PostgresConnection, load: () throws -> Void) throws -> Double {
        let list = tables.joined(separator: ",")
        let constraints = try connection.query(
            """
            SELECT conrelid::regclass::text AS owner, conname, pg_get_constraintdef(oid) AS definition, contype FROM pg_constraint
            WHERE contype IN ('p', 'u', 'f') AND conparentid = 0
              AND (conrelid = ANY(string_to_array(\(list), ',')::regclass[]) OR confrelid = ANY(string_to_array(\(list), ',')::regclass[]))
            ORDER BY contype DESC, conname
            """
        ).rows.compactMap { row -> (owner: String, name: String, definition: String, foreign: Bool)? in
            guard let owner = row.string("owner"), let name = row.string("conname"), let definition = row.string("definition") else { return nil }
            return (owner, name, definition, row.string("contype") == "f")
        }
        let indexes = try connection.query(
            """
            SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ANY(string_to_array(\(list), ','))
              AND indexname NOT IN (SELECT conname FROM pg_constraint)
            ORDER BY indexname
            """
        ).rows.compactMap { row -> (name: String, definition: String)? in
            guard let name = row.string("indexname"), let definition = row.string("indexdef") else { return nil }
            return (name, definition)
        }
        for index in indexes { try connection.execute("DROP INDEX \(index.name)") }
        // Foreign keys first (they depend on the keys they reference), then the keys.
        for constraint in constraints.sorted(by: { $0.foreign && !$1.foreign }) {
            try connection.execute("ALTER TABLE \(constraint.owner) DROP CONSTRAINT \(constraint.name)")
        }
        try load()
        let start = BenchClock.wall()
        for constraint in constraints.sorted(by: { !$0.foreign && $1.foreign }) {
            try connection.execute("ALTER TABLE \(constraint.owner) ADD CONSTRAINT \(constraint.name) \(constraint.definition)")
        }
        for index in indexes { try connection.execute(index.definition) }
        return Double(BenchClock.wall() &- start) / 1e9
    }

    /// `INSERT … SELECT` over `0..<count` in chunks of `chunk` rows (`statement` gets the chunk's
    /// first and last numbers), with a progress line per chunk.
    static func chunked(
        _ count: Int, chunk: Int = 1_000_000, label: String, on connection: PostgresConnection,
        statement: (_ first: Int, _ last: Int) throws -> PostgresQuery
    ) throws {
        let start = BenchClock.wall()
        var first = 0
        while first < count {
            let last = min(count, first + chunk) - 1
            _ = try connection.query(try statement(first, last))
            first = last + 1
            let elapsed = Double(BenchClock.wall() &- start) / 1e9
            FileHandle.standardError.write(Data("\(label): \(first) of \(count) (\(String(format: "%.0f", elapsed)) s)\n".utf8))
        }
    }
}
