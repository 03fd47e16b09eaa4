import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import Testing

/// The customer view's look-up against real Postgres: a user's purchases, renewals included, and
/// from an index, so that support staff's search does not read the whole ledger of the app.
@Suite("Postgres customer directory", .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct CustomerDirectoryTests {
    @Test("A user's renewals and one-off purchases are found, and (app, user) is answered from an index for renewals too")
    func purchasesByUser() async throws {
        let configuration = try TestSystem.migratedDatabase()
        let connection = try PostgresConnection(configuration: configuration.postgres)
        defer { connection.close() }
        let (app, _) = try AppAdmin(connection: connection).addApp(
            name: "customers-\(UUID().uuidString)", bundleID: "com.example.customers", sharedSecret: "s")
        let user = "customer-\(UUID().uuidString)"
        let renewal = "renewal-\(UUID().uuidString)"
        let lifetime = "lifetime-\(UUID().uuidString)"
        func purchase(_ id: String, expires: Date?) -> InAppPurchase {
            InAppPurchase(
                quantity: 1, productID: expires == nil ? "lifetime" : "monthly", transactionID: id, originalTransactionID: id,
                purchaseDate: Date(timeIntervalSince1970: 1_700_000_000), originalPurchaseDate: nil, expiresDate: expires,
                cancellationDate: nil, webOrderLineItemID: nil, isTrialPeriod: false, isInIntroOfferPeriod: false)
        }
        let envelope = JobEnvelope(
            id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: Date(), origin: .api, receipt: "MIIreceipt", style: .unified,
            bundleID: app.bundleID, submission: Submission(userIdentifier: user))
        let record = ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0,
            purchases: [purchase(renewal, expires: Date(timeIntervalSince1970: 1_702_592_000)), purchase(lifetime, expires: nil)],
            latestReceipt: nil, calls: [], validatedAt: Date())
        let saved = try PostgresReceiptStore(connection: connection).save([record])
        guard case .success = saved.first else { throw StoreFailure(code: "test", message: "not stored: \(saved)") }

        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        let found = try await PostgresCustomerDirectory(pool: pool).customer(CustomerQuery(userIdentifier: user))
        #expect(Set(found.purchases.map(\.transactionID)) == [renewal, lifetime])

        // The plan of the directory's (app, user) condition when Postgres may not scan the table: an
        // index answers it with the user in the index condition. With only the partial index of
        // 0005 (purchases without an expiry) the user was a filter over every purchase of the app.
        let plan = try connection.transaction { connection -> String in
            try connection.execute("SET LOCAL enable_seqscan = off")
            return try connection.query(
                """
                EXPLAIN SELECT transaction_id FROM in_app_purchases p
                WHERE p.app_id = ANY(ARRAY[\(app.id)]::uuid[]) AND p.user_identifier = ANY(ARRAY[\(user)]::text[])
                """
            ).rows.compactMap { $0.string("QUERY PLAN") }.joined(separator: "\n")
        }
        let condition = plan.split(separator: "\n").first { $0.contains("Index Cond") || $0.contains("Recheck Cond") }
        #expect(condition?.contains("user_identifier") == true, "\(plan)")
    }

    @Test("By transaction id: the StoreKit 2 submission that named it, its purchase and its subscription; receipts are found by index")
    func byTransaction() async throws {
        let configuration = try TestSystem.migratedDatabase()
        let connection = try PostgresConnection(configuration: configuration.postgres)
        defer { connection.close() }
        let (app, _) = try AppAdmin(connection: connection).addApp(
            name: "customers-\(UUID().uuidString)", bundleID: "com.example.customers", sharedSecret: "s")
        let transaction = String(UInt64.random(in: 100_000_000_000...999_999_999_999))
        let envelope = JobEnvelope(
            id: JobID.make(), kind: .validate, appID: app.id, enqueuedAt: Date(), origin: .api, receipt: "", bundleID: app.bundleID,
            submission: Submission(userIdentifier: "customer-\(UUID().uuidString)"), source: .transactionID, transactionID: transaction)
        let purchase = InAppPurchase(
            quantity: 1, productID: "monthly", transactionID: transaction, originalTransactionID: transaction,
            purchaseDate: Date(timeIntervalSince1970: 1_700_000_000), originalPurchaseDate: nil,
            expiresDate: Date().addingTimeInterval(30 * 86_400), cancellationDate: nil, webOrderLineItemID: nil, isTrialPeriod: false,
            isInIntroOfferPeriod: false)
        let state = SubscriptionState(
            originalTransactionID: transaction, productID: "monthly", status: .active, expiresAt: purchase.expiresDate,
            latestTransactionID: transaction, observedAt: Date())
        let record = ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: [purchase], latestReceipt: nil,
            calls: [], validatedAt: Date(), subscriptions: [PlannedSubscription(state: state, nextPollAt: nil)])
        let saved = try PostgresReceiptStore(connection: connection).save([record])
        guard case .success = saved.first else { throw StoreFailure(code: "test", message: "not stored: \(saved)") }

        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        let found = try await PostgresCustomerDirectory(pool: pool).customer(CustomerQuery(transactionID: transaction))
        #expect(found.receipts.map(\.id) == [envelope.id])
        #expect(found.purchases.map(\.transactionID) == [transaction])
        #expect(found.subscriptions.map(\.resource.state.originalTransactionID) == [transaction])

        let plan = try connection.transaction { connection -> String in
            try connection.execute("SET LOCAL enable_seqscan = off")
            return try connection.query(
                "EXPLAIN SELECT id FROM receipts WHERE app_id = ANY(ARRAY[\(app.id)]::uuid[]) AND transaction_id = \(transaction)"
            ).rows.compactMap { $0.string("QUERY PLAN") }.joined(separator: "\n")
        }
        let condition = plan.split(separator: "\n").first { $0.contains("Index Cond") || $0.contains("Recheck Cond") }
        #expect(condition?.contains("transaction_id") == true, "\(plan)")
    }
}
