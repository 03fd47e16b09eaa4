import Foundation
import Libpq

/// The bench's apps in the shared database: removed with everything stored under them after a row,
/// so the database does not grow run after run.
enum BenchApps {
    /// Deletes `app` and its rows, children first, in one transaction; a failure is reported, not fatal.
    static func delete(_ app: UUID, on postgres: PostgresConnection, row: String) {
        do {
            try postgres.transaction { db in
                _ = try db.query("DELETE FROM validation_attempts WHERE receipt_id IN (SELECT id FROM receipts WHERE app_id = \(app))")
                _ = try db.query("DELETE FROM subscriptions WHERE app_id = \(app)")
                _ = try db.query("DELETE FROM in_app_purchases WHERE app_id = \(app)")
                _ = try db.query("DELETE FROM notifications WHERE app_id = \(app)")
                _ = try db.query("DELETE FROM receipts WHERE app_id = \(app)")
                _ = try db.query("DELETE FROM api_tokens WHERE app_id = \(app)")
                _ = try db.query("DELETE FROM apps WHERE id = \(app)")
            }
        } catch {
            FileHandle.standardError.write(Data("\(row): cleanup of app \(app) failed: \(error)\n".utf8))
        }
    }
}
