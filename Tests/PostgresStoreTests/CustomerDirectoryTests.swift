import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The customer view's look-up against real Postgres: a user's purchases, renewals included, and
/// from an index, so that support staff's search does not read the whole ledger of the app.
@Suite("Postgres customer directory", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct CustomerDirectoryTests {
    let configuration: AppConfiguration
    let connection: PostgresConnection
    let app: AppRecord

    init() throws {
        (configuration, connection, app) = try TestSystem.newApp(named: "customers", bundleID: "com.example.customers")
    }

    /// Stores `record` as the worker does, and looks `query` up as the customer view does.
    func lookUp(_ query: CustomerQuery, after record: ValidationRecord) async throws -> CustomerRecord {
        let saved = try PostgresReceiptStore(connection: connection).save([record])
        guard case .success = saved.first else { throw StoreFailure(code: .driver("test"), message: "not stored: \(saved)") }
        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        return try await PostgresCustomerDirectory(pool: pool).customer(query)
    }

    /// The plan of `sql` when Postgres may not scan tables: the condition an index answers.
    func indexCondition(_ sql: PostgresQuery) throws -> (condition: String?, plan: String) {
        let plan = try connection.transaction { connection -> String in
            try connection.execute("SET LOCAL enable_seqscan = off")
            return try connection.query(sql).rows.compactMap { $0.string("QUERY PLAN") }.joined(separator: "\n")
        }
        let condition = plan.split(separator: "\n").first { $0.contains("Index Cond") || $0.contains("Recheck Cond") }
        return (condition.map(String.init), plan)
    }

    @Test("A user's renewals and one-off purchases are found, and (app, user) is answered from an index for renewals too")
    func purchasesByUser() async throws {
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
            id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .api,
            payload: .receipt(
                ReceiptJob(receipt: "MIIreceipt", style: .unified, bundleID: app.bundleID, submission: Submission(userIdentifier: user))))
        let record = ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0,
            purchases: [purchase(renewal, expires: Date(timeIntervalSince1970: 1_702_592_000)), purchase(lifetime, expires: nil)],
            latestReceipt: nil, calls: [], validatedAt: Date())
        let found = try await lookUp(CustomerQuery(userIdentifier: user), after: record)
        #expect(Set(found.purchases.map(\.transactionID)) == [renewal, lifetime])

        // The directory's (app, user) condition is answered by an index with the user in it. With
        // only the partial index of 0005 (purchases without an expiry) the user was a filter over
        // every purchase of the app. The plan asked about is that of an app with a ledger of other
        // users, with statistics: over an app's two rows the planner costs the user as an index
        // condition and as a filter alike, and a fresh CI database got the filter.
        let ledger = (0..<40).map { n in
            let other = JobEnvelope(
                id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .api,
                payload: .receipt(
                    ReceiptJob(
                        receipt: "MIIreceipt", style: .unified, bundleID: app.bundleID,
                        submission: Submission(userIdentifier: "other-\(n)-\(UUID().uuidString)"))))
            return ValidationRecord(
                envelope: other, status: .valid, environment: "sandbox", appleStatus: 0,
                purchases: (0..<50).map { _ in purchase("ledger-\(UUID().uuidString)", expires: nil) }, latestReceipt: nil, calls: [],
                validatedAt: Date())
        }
        let stored = try PostgresReceiptStore(connection: connection).save(ledger)
        #expect(stored.allSatisfy { if case .success = $0 { true } else { false } })
        try connection.execute("ANALYZE in_app_purchases")
        let (condition, plan) = try indexCondition(
            """
            EXPLAIN SELECT transaction_id FROM in_app_purchases p
            WHERE p.app_id = ANY(ARRAY[\(app.id)]::uuid[]) AND p.user_identifier = ANY(ARRAY[\(user)]::text[])
            """)
        #expect(condition?.contains("user_identifier") == true, "\(plan)")
    }

    @Test("Without an app filter, a user's events are found in an app whose receipts are older than the newest 200 of another")
    func eventsOfAnOlderApp() async throws {
        let user = "customer-\(UUID().uuidString)"
        let (other, _) = try AppAdmin(connection: connection).addApp(
            name: "customers-other-\(UUID().uuidString)", bundleID: "com.example.customers.other", sharedSecret: "s")
        func record(_ app: AppRecord, at date: Date) -> ValidationRecord {
            let id = "lifetime-\(UUID().uuidString)"
            let envelope = JobEnvelope(
                id: JobID.make(), appID: app.id, enqueuedAt: date, origin: .api,
                payload: .receipt(
                    ReceiptJob(receipt: "MIIreceipt", style: .unified, bundleID: app.bundleID, submission: Submission(userIdentifier: user))))
            let purchase = InAppPurchase(
                quantity: 1, productID: "lifetime", transactionID: id, originalTransactionID: id, purchaseDate: date,
                originalPurchaseDate: nil, expiresDate: nil, cancellationDate: nil, webOrderLineItemID: nil, isTrialPeriod: false,
                isInIntroOfferPeriod: false)
            return ValidationRecord(
                envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: [purchase], latestReceipt: nil,
                calls: [], validatedAt: Date())
        }
        // The other app's 200 receipts (the page's limit) are newer than this app's one, so the
        // page's receipts and purchases are all the other app's.
        let newer = (0..<200).map { record(other, at: Date(timeIntervalSince1970: 1_700_000_000 + Double($0))) }
        let saved = try PostgresReceiptStore(connection: connection).save(newer)
        #expect(saved.allSatisfy { if case .success = $0 { true } else { false } })
        let found = try await lookUp(CustomerQuery(userIdentifier: user), after: record(app, at: Date(timeIntervalSince1970: 1_600_000_000)))
        #expect(found.receipts.count == 200 && found.receipts.allSatisfy { $0.appID == other.id })
        #expect(found.events.contains { $0.appID == app.id && $0.userIdentifier == user }, "\(found.events.map(\.appID))")
    }

    @Test("By transaction id: the StoreKit 2 submission that named it, its purchase and its subscription; receipts are found by index")
    func byTransaction() async throws {
        let transaction = String(UInt64.random(in: 100_000_000_000...999_999_999_999))
        let envelope = JobEnvelope(
            id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .api,
            payload: .transaction(
                TransactionJob(
                    signedTransaction: nil, transactionID: transaction, bundleID: app.bundleID,
                    submission: Submission(userIdentifier: "customer-\(UUID().uuidString)"))))
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
        let found = try await lookUp(CustomerQuery(transactionID: transaction), after: record)
        #expect(found.receipts.map(\.id) == [envelope.id])
        #expect(found.purchases.map(\.transactionID) == [transaction])
        #expect(found.subscriptions.map(\.resource.state.originalTransactionID) == [transaction])

        // Read from an index, not the table. Which one is the planner's call: for a new app's one
        // row, (app_id, created_at) and (app_id, transaction_id) cost the same, and a fresh-clone
        // run took the first and filtered. So: an index answers (app, transaction) outright, and
        // the look-up is answered from an index.
        let (condition, plan) = try indexCondition(
            "EXPLAIN SELECT id FROM receipts WHERE app_id = ANY(ARRAY[\(app.id)]::uuid[]) AND transaction_id = \(transaction)")
        #expect(condition?.contains("app_id") == true, "\(plan)")
        let indexes = try await connection.query("SELECT indexdef FROM pg_indexes WHERE tablename = 'receipts'").rows.compactMap {
            $0.string("indexdef")
        }
        #expect(indexes.contains { $0.contains("(app_id, transaction_id)") }, "\(indexes)")
    }
}
