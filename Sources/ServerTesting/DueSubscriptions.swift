import Foundation
import Libpq
import ReceiptCore

/// Subscriptions written straight into Postgres for the scheduler's tests, as the worker would
/// have stored them: monthly, active, each on a receipt of its own, its next poll at a chosen
/// instant (the scheduler's claims are what those tests watch, not how the rows came to be).
public enum DueSubscriptions {
    /// Seeds `count` subscriptions of `app`, their original transaction ids `tag-1` … `tag-count`.
    /// - Parameters:
    ///   - observedAt: when Apple was last heard about them.
    ///   - pollAt: their `next_poll_at`.
    ///   - expiresAt: the end of their current period.
    public static func seed(
        _ count: Int, of app: AppRecord, tag: String, observedAt: Date, pollAt: Date, expiresAt: Date, on connection: PostgresConnection
    ) throws {
        _ = try connection.query(
            """
            WITH r AS (
                INSERT INTO receipts (id, app_id, status, receipt_data, created_at, environment, style, bundle_id)
                SELECT gen_random_uuid(), \(app.id), 'valid', 'MIIreceipt-' || n, now(), 'sandbox', 'unified', \(app.bundleID)
                FROM generate_series(1, \(count)) AS n
                RETURNING id, receipt_data
            )
            INSERT INTO subscriptions (app_id, environment, original_transaction_id, product_id, state, expires_at,
                latest_transaction_id, receipt_id, observed_at, next_poll_at, user_identifier)
            SELECT \(app.id), 'sandbox', \(tag) || '-' || substr(r.receipt_data, 12), 'monthly', 'active',
                   \(expiresAt), 't', r.id, \(observedAt), \(pollAt), 'alice'
            FROM r
            """)
    }
}
