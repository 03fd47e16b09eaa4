import Foundation
import Libpq

/// The bench's apps in the shared database: removed with everything stored under them after a row,
/// so the database does not grow run after run — and left in a known state for the next row.
enum BenchApps {
    /// The tables a row writes under its apps, vacuumed and analyzed after a cleanup.
    static let tables = "receipts, in_app_purchases, validation_attempts, subscriptions, notifications, events, webhook_deliveries"

    /// Deletes `apps` and their rows, children first; a failure is reported, not fatal.
    ///
    /// The children go in a transaction of their own and are vacuumed before the receipts go:
    /// each receipt's delete checks `subscriptions.receipt_id` (no index: nothing else looks a
    /// subscription up by it) with a scan, which over the same transaction's dead rows made a
    /// cleanup quadratic (15–26 s for 20,000 receipts). Then `VACUUM (ANALYZE)`: the next row's
    /// plans start from the statistics of what is left, not of tables that were full when last
    /// analyzed (or empty, while they fill again: issue 20's "cost grows with history").
    static func delete(_ apps: [UUID], on postgres: PostgresConnection, row: String) {
        guard !apps.isEmpty else { return }
        // A uuid[] literal: UUIDs need no quoting inside one.
        let ids = "{" + apps.map(\.uuidString).joined(separator: ",") + "}"
        do {
            try postgres.transaction { db in
                _ = try db.query(
                    "DELETE FROM validation_attempts WHERE receipt_id IN (SELECT id FROM receipts WHERE app_id = ANY(\(ids)::uuid[]))")
                _ = try db.query("DELETE FROM subscriptions WHERE app_id = ANY(\(ids)::uuid[])")
                _ = try db.query("DELETE FROM in_app_purchases WHERE app_id = ANY(\(ids)::uuid[])")
                _ = try db.query("DELETE FROM notifications WHERE app_id = ANY(\(ids)::uuid[])")
            }
            try postgres.execute("VACUUM subscriptions, in_app_purchases, validation_attempts, notifications")
            try postgres.transaction { db in
                // Their children are gone (above): the foreign-key checks would only scan, for
                // each receipt, `subscriptions` and `notifications` by their unindexed
                // `receipt_id` — minutes per thousand receipts next to pipeline_history's 5 M
                // subscriptions. Replica mode skips those triggers for this statement's
                // transaction only (the receiptq role of scripts/services is a superuser).
                try db.execute("SET LOCAL session_replication_role = replica")
                _ = try db.query("DELETE FROM receipts WHERE app_id = ANY(\(ids)::uuid[])")
                try db.execute("SET LOCAL session_replication_role = origin")
                _ = try db.query("DELETE FROM api_tokens WHERE app_id = ANY(\(ids)::uuid[])")
                // Events, deliveries, endpoints and the rest go with the app (ON DELETE CASCADE).
                _ = try db.query("DELETE FROM apps WHERE id = ANY(\(ids)::uuid[])")
            }
            try postgres.execute("VACUUM (ANALYZE) \(tables)")
        } catch {
            FileHandle.standardError.write(Data("\(row): cleanup of \(apps.count) app(s) failed: \(error)\n".utf8))
        }
    }
}
