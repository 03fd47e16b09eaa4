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
            var found = Found(apps: apps, users: query.userIdentifier.map { [$0] } ?? [])
            // A user merged with others (issue 43) is one customer: every id of it is looked up.
            if let user = query.userIdentifier { found.users = try IdentityRows.customerIDs(of: user, apps: found.appList, on: connection) }
            if let transaction = query.transactionID {
                found.purchases = try Self.purchases(transaction: transaction, of: found, on: connection)
                for purchase in found.purchases {
                    for user in [purchase.userIdentifier, purchase.conflictUserIdentifier].compactMap({ $0 }) where !found.users.contains(user) {
                        found.users.append(user)
                    }
                }
            }
            let receipts = try Self.receipts(transaction: query.transactionID, of: found, on: connection)
            if !found.users.isEmpty {
                for purchase in try Self.ownedPurchases(of: found, on: connection)
                where !found.purchases.contains(where: { $0.transactionID == purchase.transactionID && $0.environment == purchase.environment }) {
                    found.purchases.append(purchase)
                }
            }
            let subscriptions = try Self.subscriptions(of: found, on: connection)
            // An event is filed under the app of the record that made it. Without an app filter,
            // only the apps where this customer has a receipt, purchase or subscription are
            // searched: every app's index probed for every subject made the planner read the whole
            // events table instead (8.4 s over 9.6 M events and 9,300 apps).
            var eventApps = Set(apps)
            if query.appID == nil {
                eventApps = Set(receipts.map(\.appID)).union(found.purchases.map(\.appID)).union(subscriptions.map(\.0))
                // A user who only stored an app transaction (a free app) can still have a
                // `customer.consent_rescinded` event.
                if !found.users.isEmpty {
                    eventApps.formUnion(
                        try connection.query(
                            """
                            SELECT DISTINCT app_id FROM app_transactions
                            WHERE app_id = ANY(\(found.appList)::uuid[]) AND user_identifier = ANY(\(found.userList)::text[])
                            """
                        ).rows.compactMap { $0.uuid("app_id") })
                }
                if !found.users.isEmpty, receipts.count == Self.limit {
                    // The receipts above were cut at the limit: an older receipt's app counts too.
                    eventApps.formUnion(try Self.receiptApps(of: found, on: connection))
                }
            }
            let events = try Self.events(of: found, apps: eventApps, on: connection)
            return CustomerRecord(
                userIdentifiers: found.users, receipts: receipts, purchases: found.purchases, subscriptions: subscriptions, events: events,
                deliveries: try Self.deliveries(of: events, on: connection), calls: try Self.calls(of: receipts, on: connection))
        }
    }

    /// What the look-up has found so far: the apps searched, the customer's user identifiers, and
    /// their purchases; each next query is bounded by them.
    private struct Found {
        var apps: [UUID]
        var users: [String]
        var purchases: [CustomerRecord.Purchase] = []

        var appList: String { PostgresArray.literal(apps.map(\.uuidString)) }
        var userList: String { PostgresArray.literal(users.map { Optional($0) }) }
    }

    /// The purchases of a transaction id (as the transaction or as the original).
    private static func purchases(
        transaction: String, of found: Found, on connection: PostgresConnection
    ) throws -> [CustomerRecord.Purchase] {
        // Both indexes that find a transaction lead with its environment: the ledger's few
        // environments are read first (an index probe each), so that the search probes
        // them and does not read every purchase of the app (4.7 s over 30 M purchases).
        try connection.query(
            """
            WITH RECURSIVE environments AS (
                SELECT min(environment) AS environment FROM in_app_purchases
                UNION ALL
                SELECT (SELECT min(q.environment) FROM in_app_purchases q WHERE q.environment > e.environment)
                FROM environments e WHERE e.environment IS NOT NULL
            )
            SELECT \(unescaped: Self.purchaseColumns) FROM in_app_purchases p
            WHERE p.app_id = ANY(\(found.appList)::uuid[])
              AND p.environment = ANY(ARRAY(SELECT environment FROM environments WHERE environment IS NOT NULL))
              AND (p.transaction_id = \(transaction) OR p.original_transaction_id = \(transaction))
            ORDER BY p.purchase_date DESC NULLS LAST LIMIT \(Self.limit)
            """
        ).rows.compactMap(Self.purchase)
    }

    /// The receipts of the customer's users, or carrying the transaction.
    private static func receipts(
        transaction: String?, of found: Found, on connection: PostgresConnection
    ) throws -> [CustomerRecord.Receipt] {
        try connection.query(
            """
            SELECT id, app_id, user_identifier, status, environment, source, validated_by, error_code, fraud_reason, created_at,
                   validated_at
            FROM receipts
            WHERE app_id = ANY(\(found.appList)::uuid[])
              AND (user_identifier = ANY(\(found.userList)::text[]) OR (\(transaction)::text IS NOT NULL AND transaction_id = \(transaction)))
            ORDER BY created_at DESC LIMIT \(Self.limit)
            """
        ).rows.compactMap(Self.receipt)
    }

    /// The purchases the customer's users own.
    private static func ownedPurchases(of found: Found, on connection: PostgresConnection) throws -> [CustomerRecord.Purchase] {
        try connection.query(
            """
            SELECT \(unescaped: Self.purchaseColumns) FROM in_app_purchases p
            WHERE p.app_id = ANY(\(found.appList)::uuid[]) AND p.user_identifier = ANY(\(found.userList)::text[])
            ORDER BY p.purchase_date DESC NULLS LAST LIMIT \(Self.limit)
            """
        ).rows.compactMap(Self.purchase)
    }

    /// The subscriptions of the customer's users or of their purchases, with their apps.
    private static func subscriptions(
        of found: Found, on connection: PostgresConnection
    ) throws -> [(UUID, SubscriptionResource)] {
        let originals = Array(Set(found.purchases.map(\.originalTransactionID)))
        // With the purchases' environments, the key's middle column, a subscription is an index
        // probe (without them, every subscription of the app was read: 2.5 s over 5 M); rows
        // of another environment that share an original id are dropped below.
        let pairs = Set(found.purchases.map { "\($0.environment)\u{0}\($0.originalTransactionID)" })
        let environments = Array(Set(found.purchases.map(\.environment)))
        return try connection.query(
            """
            SELECT \(unescaped: SubscriptionRows.columns) FROM subscriptions s
            WHERE s.app_id = ANY(\(found.appList)::uuid[])
              AND (s.user_identifier = ANY(\(found.userList)::text[])
                   OR (s.environment = ANY(\(PostgresArray.literal(environments.map { Optional($0) }))::text[])
                       AND s.original_transaction_id = ANY(\(PostgresArray.literal(originals.map { Optional($0) }))::text[])))
            ORDER BY s.expires_at DESC NULLS LAST LIMIT \(Self.limit)
            """
        ).rows.compactMap { row in row.uuid("app_id").flatMap { app in SubscriptionRows.resource(row).map { (app, $0) } } }
            .filter { _, subscription in
                subscription.userIdentifier.map(found.users.contains) == true
                    || pairs.contains("\(subscription.environment)\u{0}\(subscription.state.originalTransactionID)")
            }
    }

    /// Every app where the customer's users have a receipt.
    private static func receiptApps(of found: Found, on connection: PostgresConnection) throws -> [UUID] {
        try connection.query(
            """
            SELECT DISTINCT app_id FROM receipts
            WHERE app_id = ANY(\(found.appList)::uuid[]) AND user_identifier = ANY(\(found.userList)::text[])
            """
        ).rows.compactMap { $0.uuid("app_id") }
    }

    /// The events in `apps` of the customer's users, or about their purchases and subscriptions.
    private static func events(of found: Found, apps: Set<UUID>, on connection: PostgresConnection) throws -> [ChangeEvent] {
        let originals = Array(Set(found.purchases.map(\.originalTransactionID)))
        let subjects = originals.map { Optional("subscription:\($0)") } + found.purchases.map { Optional("purchase:\($0.transactionID)") }
        return try connection.query(
            """
            SELECT \(unescaped: PostgresEventCatalog.columns) FROM events e
            WHERE e.app_id = ANY(\(PostgresArray.literal(apps.map(\.uuidString)))::uuid[])
              AND (e.user_identifier = ANY(\(found.userList)::text[]) OR e.subject = ANY(\(PostgresArray.literal(subjects))::text[]))
            ORDER BY e.txid DESC, e.id DESC LIMIT \(Self.limit)
            """
        ).rows.compactMap(PostgresEventCatalog.event)
    }

    /// The webhook deliveries of `events`.
    private static func deliveries(of events: [ChangeEvent], on connection: PostgresConnection) throws -> [CustomerRecord.Delivery] {
        try connection.query(
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
    }

    /// The calls to Apple of `receipts`.
    private static func calls(of receipts: [CustomerRecord.Receipt], on connection: PostgresConnection) throws -> [CustomerRecord.AppleCall] {
        try connection.query(
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
    }

    private static let purchaseColumns = """
        p.app_id, \(PurchaseRows.columns("p")), p.user_identifier, p.is_conflict, p.conflict_user_identifier
        """

    private static func purchase(_ row: PostgresRow) -> CustomerRecord.Purchase? {
        guard let app = row.uuid("app_id"), row.string("transaction_id") != nil else { return nil }
        let purchase = PurchaseRows.purchase(row)
        return CustomerRecord.Purchase(
            appID: app, environment: row.string("environment") ?? "", transactionID: purchase.transactionID,
            originalTransactionID: purchase.originalTransactionID, productID: purchase.productID,
            userIdentifier: row.string("user_identifier"), purchaseDate: purchase.purchaseDate, expiresDate: purchase.expiresDate,
            cancellationDate: purchase.cancellationDate, isConflict: row.bool("is_conflict") ?? false,
            conflictUserIdentifier: row.string("conflict_user_identifier"), quantity: purchase.quantity, price: purchase.price,
            offer: purchase.offer, ownershipType: purchase.ownershipType, revocation: purchase.revocation)
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
