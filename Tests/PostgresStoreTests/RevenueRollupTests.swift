import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The revenue rollup (migration 0030) through the worker's batched store and read back by
/// `PostgresRevenueFigures`: purchases, renewals and refunds on their days, subscriptions' levels
/// and churn, each counted once however often a batch is replayed, and nothing with the rollup off.
@Suite("Postgres revenue rollup", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RevenueRollupTests {
    let connection: PostgresConnection
    let pool: PostgresConnectionPool
    let app: AppRecord
    static let usd = CurrencyCode(rawValue: "USD")!
    static let eur = CurrencyCode(rawValue: "EUR")!
    /// 2027-01-15 00:00 UTC.
    static let day0 = Date(timeIntervalSince1970: 1_800_000_000 - 1_800_000_000.truncatingRemainder(dividingBy: 86_400))
    static let day: TimeInterval = 86_400

    init() throws {
        let configuration: AppConfiguration
        (configuration, connection, app) = try TestSystem.newApp(named: "revenue", bundleID: "com.example.revenue")
        pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
    }

    func text(_ date: Date) -> String { RevenueCalendar.text(date) }

    func record(_ purchases: [InAppPurchase], subscriptions: [SubscriptionState] = [], at: Date) -> ValidationRecord {
        let envelope = JobEnvelope(
            id: JobID.make(), appID: app.id, enqueuedAt: at, origin: .api,
            payload: .receipt(
                ReceiptJob(
                    receipt: "MIIrevenue", style: .unified, bundleID: "com.example.revenue",
                    submission: Submission(userIdentifier: "revenue-user"))))
        return ValidationRecord(
            envelope: envelope, status: .valid, environment: "sandbox", appleStatus: 0, purchases: purchases, latestReceipt: nil,
            calls: [], validatedAt: at, subscriptions: subscriptions.map { PlannedSubscription(state: $0, nextPollAt: nil) })
    }

    func purchase(_ id: String, original: String? = nil, at: Date, price: Money?, expires: Date? = nil, quantity: Int = 1) -> InAppPurchase {
        var purchase = InAppPurchase(
            quantity: quantity, productID: expires == nil ? "coins" : "monthly", transactionID: id,
            originalTransactionID: original ?? id, purchaseDate: at, expiresDate: expires)
        purchase.price = price
        return purchase
    }

    func subscription(
        _ original: String, _ status: SubscriptionStatus, latest: String, from: Date, to: Date, price: Money?, observed: Date
    )
        -> SubscriptionState
    {
        SubscriptionState(
            originalTransactionID: original, productID: "monthly", status: status, expiresAt: to, purchasedAt: from,
            latestTransactionID: latest, observedAt: observed, price: price)
    }

    func figures(_ from: Date, _ to: Date) async throws -> [RevenueDay] {
        try #require(try await PostgresRevenueFigures(pool: pool).revenue(appID: app.id, from: text(from), to: text(to)))
    }

    @Test("Purchases, renewals, refunds and subscriptions' levels land on their days, once each, replays adding nothing")
    func rollup() async throws {
        defer { pool.close() }
        let store = PostgresReceiptStore(connection: connection)
        let sub = "rev-sub-\(UUID().uuidString)"
        let month = 30 * Self.day
        let monthly = Money(milli: 9_990, currency: Self.usd)
        // Day 0: a subscription bought (9.99 a month) and a consumable of 3 (29.97).
        let first = purchase(sub, at: Self.day0, price: monthly, expires: Self.day0 + month)
        let coins = "rev-coins-\(UUID().uuidString)"
        var bought = purchase(coins, at: Self.day0 + 3600, price: Money(milli: 29_970, currency: Self.usd), quantity: 3)
        let active = subscription(sub, .active, latest: sub, from: Self.day0, to: Self.day0 + month, price: monthly, observed: Self.day0 + 60)
        let day0 = record([first, bought], subscriptions: [active], at: Self.day0 + 60)
        _ = try store.save([day0])
        _ = try store.save([day0])  // replayed: nothing more

        // A third of the coins refunded, prorated: no revocation date stands on the purchase, so the
        // refund is on the day receiptq heard of it (a notification's: its signing day), today.
        bought.revocation = PurchaseRevocation(
            kind: .refundProrated, percentageMilli: 33_333, quantity: 3, price: Money(milli: 29_970, currency: Self.usd))
        let refund = record([bought], at: Self.day0 + Self.day + 60)
        _ = try store.save([refund])
        _ = try store.save([refund])
        // A full refund of a second consumable, revoked on day 1.
        let gift = "rev-gift-\(UUID().uuidString)"
        var given = purchase(gift, at: Self.day0 + 7200, price: Money(milli: 990, currency: Self.usd))
        _ = try store.save([record([given], at: Self.day0 + 7200)])
        given.cancellationDate = Self.day0 + Self.day + 60
        _ = try store.save([record([given], at: Self.day0 + Self.day + 60)])

        // Day 30: renewed at a new price (a year's plan would be a twelfth a month: here 12.00 a month).
        let renewalID = "rev-renewal-\(UUID().uuidString)"
        let dearer = Money(milli: 12_000, currency: Self.usd)
        let renewed = purchase(renewalID, original: sub, at: Self.day0 + month, price: dearer, expires: Self.day0 + 2 * month)
        let stillActive = subscription(
            sub, .active, latest: renewalID, from: Self.day0 + month, to: Self.day0 + 2 * month, price: dearer,
            observed: Self.day0 + month + 60)
        _ = try store.save([record([first, renewed], subscriptions: [stillActive], at: Self.day0 + month + 60)])

        // Day 60: expired.
        let expired = subscription(
            sub, .expired, latest: renewalID, from: Self.day0 + month, to: Self.day0 + 2 * month, price: dearer,
            observed: Self.day0 + 2 * month + 60)
        let end = record([first, renewed], subscriptions: [expired], at: Self.day0 + 2 * month + 60)
        _ = try store.save([end])
        _ = try store.save([end])

        let days = try await figures(Self.day0, Self.day0 + 2 * month)
        #expect(days.count == 61, "one currency on each of 61 days")
        let usd = Dictionary(uniqueKeysWithValues: days.filter { $0.currency == "USD" }.map { ($0.day, $0) })
        let d0 = try #require(usd[text(Self.day0)])
        #expect(d0.grossMilli == 40_950 && d0.purchases == 3 && d0.newSubscriptions == 1 && d0.renewals == 0)
        #expect(d0.activeSubscriptions == 1 && d0.mrrMilli == 9_990 && d0.refunds == 0)
        let d1 = try #require(usd[text(Self.day0 + Self.day)])
        #expect(d1.refundsMilli == 990 && d1.refunds == 1 && d1.grossMilli == 0 && d1.netMilli == -990)
        #expect(d1.activeSubscriptions == 1 && d1.mrrMilli == 9_990, "levels carry over")
        let d30 = try #require(usd[text(Self.day0 + month)])
        #expect(d30.grossMilli == 12_000 && d30.renewals == 1 && d30.newSubscriptions == 0)
        #expect(d30.activeSubscriptions == 1 && d30.mrrMilli == 12_000, "the new price is the MRR")
        let d60 = try #require(usd[text(Self.day0 + 2 * month)])
        #expect(d60.activeSubscriptions == 0 && d60.mrrMilli == 0 && d60.churned == 1 && d60.churnRateBasisPoints == 10_000)

        let today = try await figures(Date(), Date())
        #expect(today.first { $0.currency == "USD" }?.refundsMilli == 9_990, "the prorated third")

        // A range starting later opens with the levels of the days before it.
        let later = try await figures(Self.day0 + 10 * Self.day, Self.day0 + 10 * Self.day)
        #expect(later.map(\.activeSubscriptions) == [1] && later.map(\.mrrMilli) == [9_990] && later.map(\.grossMilli) == [0])
    }

    @Test("A price learnt after the purchase moves it from XXX to its currency; a family member's purchase earns nothing")
    func priceLearntLater() async throws {
        defer { pool.close() }
        let store = PostgresReceiptStore(connection: connection)
        let id = "rev-late-\(UUID().uuidString)"
        let at = Self.day0 + 200 * Self.day
        _ = try store.save([record([purchase(id, at: at, price: nil)], at: at)])
        _ = try store.save([record([purchase(id, at: at, price: Money(milli: 4_990, currency: Self.eur))], at: at + 60)])
        var shared = purchase("rev-family-\(UUID().uuidString)", at: at, price: Money(milli: 4_990, currency: Self.eur))
        shared.ownershipType = "FAMILY_SHARED"
        _ = try store.save([record([shared], at: at)])
        let days = try await figures(at, at)
        let eur = try #require(days.first { $0.currency == "EUR" })
        let unknown = try #require(days.first { $0.currency == "XXX" })
        #expect(eur.grossMilli == 4_990 && eur.purchases == 1)
        #expect(unknown.grossMilli == 0 && unknown.purchases == 0)
    }

    @Test("With the rollup off nothing is added; the figures of an unknown app are nil")
    func off() async throws {
        defer { pool.close() }
        let store = PostgresReceiptStore(connection: connection, rollsUpRevenue: false)
        let at = Self.day0 + 300 * Self.day
        _ = try store.save([record([purchase("rev-off-\(UUID().uuidString)", at: at, price: Money(milli: 990, currency: Self.usd))], at: at)])
        #expect(try await figures(at, at).isEmpty)
        #expect(try await PostgresRevenueFigures(pool: pool).revenue(appID: UUID(), from: text(at), to: text(at)) == nil)
    }

    @Test("The database's monthly price is PlanPeriod's, period by period, at each boundary and rounding included")
    func monthlyAgrees() throws {
        defer { pool.close() }
        let start = Self.day0
        let periods: [(Double, Int64)] = [
            (7, 1_990), (31, 9_990), (28, 9_990), (61, 14_990), (92, 29_990), (183, 49_990), (365, 99_990), (3, 1), (14, 0),
            // Either side of each boundary, and prices whose share ends in a half.
            (17.999, 6), (18, 6), (44.999, 5), (45, 5), (74.999, 5), (75, 5), (134.999, 7), (135, 9), (269.999, 9), (270, 18), (2, -7),
        ]
        for (days, price) in periods {
            let end = start + days * Self.day
            let row = try #require(
                try connection.query("SELECT receiptq_monthly_milli(\(price), \(start), \(end))::text AS m").rows.first)
            let expected = try #require(PlanPeriod(seconds: days * Self.day)).monthly(price)
            #expect(row.string("m") == String(expected), "\(days) days at \(price)")
        }
        #expect(try connection.query("SELECT receiptq_monthly_milli(1, \(start), \(start))::text AS m").rows.first?.string("m") == nil)
    }

    /// A SQL function the planner cannot inline runs through the SQL-function executor on every
    /// call (~12 µs here, against a fraction of one inlined): the rollup calls it per subscription
    /// stored, so it must stay one inlinable expression.
    @Test("The planner inlines the monthly price into the rollup's statements")
    func monthlyInlined() throws {
        defer { pool.close() }
        let plan = try connection.query(
            "EXPLAIN VERBOSE SELECT receiptq_monthly_milli(i::bigint, now(), now() + make_interval(days => i)) FROM generate_series(1, 2) i"
        ).rows.compactMap { $0.string("QUERY PLAN") }.joined(separator: "\n")
        #expect(plan.contains("Output: CASE") && !plan.contains("receiptq_monthly_milli"), "\(plan)")
    }
}
