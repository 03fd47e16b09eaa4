import Foundation
import Libpq
import Logging

/// Applies the numbered SQL files of `Migrations/` in order, each in its own transaction, and
/// records them in `schema_migrations`. Idempotent, and safe when several processes start at
/// once (an advisory lock serializes them).
public enum Migrator {
    /// One migration file.
    public struct Migration: Sendable, Equatable {
        public var version: Int
        public var name: String
        public var sql: String
    }

    /// The migrations shipped with receiptq, in order.
    public static func bundled() throws -> [Migration] {
        guard let base = Bundle.module.resourceURL?.appendingPathComponent("Migrations") else { return [] }
        let files = try FileManager.default.contentsOfDirectory(atPath: base.path).filter { $0.hasSuffix(".sql") }
        return try files.compactMap { file -> Migration? in
            guard let version = Int(file.prefix { $0.isNumber }) else { return nil }
            let sql = try String(contentsOf: base.appendingPathComponent(file), encoding: .utf8)
            return Migration(version: version, name: String(file.dropLast(4)), sql: sql)
        }.sorted { $0.version < $1.version }
    }

    /// Applies every pending migration on a connection of its own, closed when done.
    /// - Parameter label: the connection's name in Postgres's `application_name`.
    /// - Returns: the names of the migrations applied now.
    @discardableResult
    public static func migrate(_ configuration: PostgresConfiguration, label: String, logger: Logger) throws -> [String] {
        let connection = try PostgresConnection(configuration: configuration, label: label, logger: logger)
        defer { connection.close() }
        return try migrate(connection)
    }

    /// Applies every pending migration.
    /// - Returns: the names of the migrations applied now.
    @discardableResult
    public static func migrate(_ connection: PostgresConnection, migrations: [Migration]? = nil) throws -> [String] {
        let migrations = try migrations ?? bundled()
        // Arbitrary but fixed key: every receiptq process migrating the same database queues here.
        _ = try connection.query("SELECT pg_advisory_lock(\(Int(0x7265_6370)))")
        defer { _ = try? connection.query("SELECT pg_advisory_unlock(\(Int(0x7265_6370)))") }
        try connection.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())
            """)
        let applied = Set(try connection.query("SELECT version FROM schema_migrations").rows.compactMap { $0.int("version") })
        var done: [String] = []
        for migration in migrations where !applied.contains(migration.version) {
            try connection.transaction { connection in
                try connection.execute(migration.sql)
                _ = try connection.query(
                    "INSERT INTO schema_migrations (version, name) VALUES (\(migration.version), \(migration.name))")
            }
            done.append(migration.name)
        }
        return done
    }
}
