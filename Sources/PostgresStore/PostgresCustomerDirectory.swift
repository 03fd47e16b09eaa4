import Foundation
import Libpq
import ReceiptCore

/// The dashboard's customer look-up: a user's (or a transaction's) receipts, ledger,
/// subscriptions, events, webhook deliveries and Apple calls, each by index and bounded.
public final class PostgresCustomerDirectory: CustomerDirectory {
    private let pool: PostgresConnectionPool
    /// The most rows of each kind one page shows.
    static let limit = 200

    /// Creates the directory on `pool`.
    public init(pool: PostgresConnectionPool) { self.pool = pool }

    public func customer(_ query: CustomerQuery) async throws -> CustomerRecord {
        try await pool.withConnection { connection in
            // A user identifier is per app: without an app, every app's (by index, app by app).
            let apps = try query.appID.map { [$0] } ?? connection.query("SELECT id FROM apps").rows.compactMap { $0.uuid("id") }
            let appList = PostgresArray.literal(apps.map(\.uuidString))
            var users: [String] = query.userIdentifier.map { [$0] } ?? []
            var purchases: [CustomerRecord.Purchase] = []
            if let transaction = query.transactionID {
                // Both indexes that find a transaction lead with its environment: the ledger's few
                // environments are read first (an index probe each), so that the search probes
                // them and does not read every purchase of the app (4.7 s over 30 M purchases).
                purchases = try connection.query(
                    """
                    WITH RECURSIVE environments AS (
                        SELECT min(environment) AS environment FROM in_app_purchases
                        UNION ALL
                        SELECT (SELECT min(q.environment) FROM in_app_purchases q WHERE q.environment > e.environment)
                        FROM environments e WHERE e.environment IS NOT NULL
                    )
                    SELECT \(unescaped: Self.purchaseColumns) FROM in_app_purchases p
                    WHERE p.app_id = ANY(\(appList)::uuid[])
                      AND p.environment = ANY(ARRAY(SELECT environment FROM environments WHERE environment IS NOT NULL))
                      AND (p.transaction_id = \(transaction) OR p.original_transaction_id = \(transaction))
                    ORDER BY p.purchase_date DESC NULLS LAST LIMIT \(Self.limit)
                    """
                ).rows.compactMap(Self.purchase)
                for purchase in purchases {
                    for user in [purchase.userIdentifier, purchase.conflictUserIdentifier].compactMap({ $0 }) where !users.contains(user) {
                        users.append(user)
                    }
                }
            }
            let userList = PostgresArray.literal(users.map { Optional($0) })
            let receipts = try connection.query(
                """
                SELECT id, app_id, user_identifier, status, environment, source, validated_by, error_code, fraud_reason, created_at,
                       validated_at
                FROM receipts
                WHERE app_id = ANY(\(appList)::uuid[])
                  AND (user_identifier = ANY(\(userList)::text[]) OR (\(query.transactionID)::text IS NOT NULL AND transaction_id = \(query.transactionID)))
                ORDER BY created_at DESC LIMIT \(Self.limit)
                """
            ).rows.compactMap(Self.receipt)
            if !users.isEmpty {
                let owned = try connection.query(
                    """
                    SELECT \(unescaped: Self.purchaseColumns) FROM in_app_purchases p
                    WHERE p.app_id = ANY(\(appList)::uuid[]) AND p.user_identifier = ANY(\(userList)::text[])
                    ORDER BY p.purchase_date DESC NULLS LAST LIMIT \(Self.limit)
                    """
                ).rows.compactMap(Self.purchase)
                for purchase in owned
                where !purchases.contains(where: { $0.transactionID == purchase.transactionID && $0.environment == purchase.environment }) {
                    purchases.append(purchase)
                }
            }
            let originals = Array(Set(purchases.map(\.originalTransactionID)))
            // With the purchases' environments, the key's middle column, a subscription is an index
            // probe (without them, every subscription of the app was read: 2.5 s over 5 M); rows
            // of another environment that share an original id are dropped below.
            let pairs = Set(purchases.map { "\($0.environment)\u{0}\($0.originalTransactionID)" })
            let environments = Array(Set(purchases.map(\.environment)))
            let subscriptions = try connection.query(
                """
                SELECT \(unescaped: SubscriptionRows.columns) FROM subscriptions s
                WHERE s.app_id = ANY(\(appList)::uuid[])
                  AND (s.user_identifier = ANY(\(userList)::text[])
                       OR (s.environment = ANY(\(PostgresArray.literal(environments.map { Optional($0) }))::text[])
                           AND s.original_transaction_id = ANY(\(PostgresArray.literal(originals.map { Optional($0) }))::text[])))
                ORDER BY s.expires_at DESC NULLS LAST LIMIT \(Self.limit)
                """
            ).rows.compactMap { row in row.uuid("app_id").flatMap { app in SubscriptionRows.resource(row).map { (app, $0) } } }
                .filter { _, subscription in
                    subscription.userIdentifier.map(users.contains) == true
                        || pairs.contains("\(subscription.environment)\u{0}\(subscription.state.originalTransactionID)")
                }
            let subjects = originals.map { Optional("subscription:\($0)") } + purchases.map { Optional("purchase:\($0.transactionID)") }
            // An event is filed under the app of the record that made it. Without an app filter,
            // only the apps where this customer has a receipt, purchase or subscription are
            // searched: every app's index probed for every subject made the planner read the whole
            // events table instead (8.4 s over 9.6 M events and 9,300 apps).
            var eventApps = Set(apps)
            if query.appID == nil {
                eventApps = Set(receipts.map(\.appID)).union(purchases.map(\.appID)).union(subscriptions.map(\.0))
                if !users.isEmpty, receipts.count == Self.limit {
                    // The receipts above were cut at the limit: an older receipt's app counts too.
                    let older = try connection.query(
                        """
                        SELECT DISTINCT app_id FROM receipts
                        WHERE app_id = ANY(\(appList)::uuid[]) AND user_identifier = ANY(\(userList)::text[])
                        """
                    ).rows.compactMap { $0.uuid("app_id") }
                    eventApps.formUnion(older)
                }
            }
            let events = try connection.query(
                """
                SELECT \(unescaped: PostgresEventCatalog.columns) FROM events e
                WHERE e.app_id = ANY(\(PostgresArray.literal(eventApps.map(\.uuidString)))::uuid[])
                  AND (e.user_identifier = ANY(\(userList)::text[]) OR e.subject = ANY(\(PostgresArray.literal(subjects))::text[]))
                ORDER BY e.txid DESC, e.id DESC LIMIT \(Self.limit)
                """
            ).rows.compactMap(PostgresEventCatalog.event)
            let deliveries = try connection.query(
                """
                SELECT d.event_id, e.type, w.url, d.status, d.attempts, d.last_http_status, d.last_error, d.last_attempt_at, d.delivered_at
                FROM webhook_deliveries d JOIN events e ON e.id = d.event_id JOIN webhook_endpoints w ON w.id = d.endpoint_id
                WHERE d.event_id = ANY(\(PostgresArray.literal(events.map { $0.id.uuidString }))::uuid[])
                ORDER BY d.id DESC LIMIT \(Self.limit)
                """
            ).rows.compactMap { row -> CustomerRecord.Delivery? in
                guard let event = row.uuid("event_id") else { return nil }
                return CustomerRecord.Delivery(
                    eventID: event, eventType: row.string("type") ?? "", endpointURL: row.string("url") ?? "", status: row.string("status") ?? "",
                    attempts: row.int("attempts") ?? 0, lastHTTPStatus: row.int("last_http_status"), lastError: row.string("last_error"),
                    lastAttemptAt: row.date("last_attempt_at"), deliveredAt: row.date("delivered_at"))
            }
            let calls = try connection.query(
                """
                SELECT receipt_id, endpoint, http_status, apple_status, latency_ms, error_code, created_at FROM validation_attempts
                WHERE receipt_id = ANY(\(PostgresArray.literal(receipts.map { $0.id.uuidString }))::uuid[])
                ORDER BY created_at DESC LIMIT \(Self.limit)
                """
            ).rows.compactMap { row -> CustomerRecord.AppleCall? in
                guard let receipt = row.uuid("receipt_id") else { return nil }
                return CustomerRecord.AppleCall(
                    receiptID: receipt, endpoint: row.string("endpoint") ?? "", httpStatus: row.int("http_status"),
                    appleStatus: row.int("apple_status"), latencyMs: row.int("latency_ms"), errorCode: row.string("error_code"),
                    at: row.date("created_at") ?? Date())
            }
            return CustomerRecord(
                userIdentifiers: users, receipts: receipts, purchases: purchases, subscriptions: subscriptions, events: events,
                deliveries: deliveries, calls: calls)
        }
    }

    private static let purchaseColumns = """
        p.app_id, p.environment, p.transaction_id, p.original_transaction_id, p.product_id, p.user_identifier, p.purchase_date,
        p.expires_date, p.cancellation_date, p.is_conflict, p.conflict_user_identifier
        """

    private static func purchase(_ row: PostgresRow) -> CustomerRecord.Purchase? {
        guard let app = row.uuid("app_id"), let transaction = row.string("transaction_id") else { return nil }
        return CustomerRecord.Purchase(
            appID: app, environment: row.string("environment") ?? "", transactionID: transaction,
            originalTransactionID: row.string("original_transaction_id") ?? transaction, productID: row.string("product_id") ?? "",
            userIdentifier: row.string("user_identifier"), purchaseDate: row.date("purchase_date"), expiresDate: row.date("expires_date"),
            cancellationDate: row.date("cancellation_date"), isConflict: row.bool("is_conflict") ?? false,
            conflictUserIdentifier: row.string("conflict_user_identifier"))
    }

    private static func receipt(_ row: PostgresRow) -> CustomerRecord.Receipt? {
        guard let id = row.uuid("id"), let app = row.uuid("app_id") else { return nil }
        return CustomerRecord.Receipt(
            id: id, appID: app, userIdentifier: row.string("user_identifier"), status: row.string("status") ?? "",
            environment: row.string("environment"), source: row.string("source"), validatedBy: row.string("validated_by"),
            errorCode: row.string("error_code"), fraudReason: row.string("fraud_reason"), createdAt: row.date("created_at") ?? Date(),
            validatedAt: row.date("validated_at"))
    }
}
