import DevTools
import Foundation
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// Money through the whole system: the mock App Store signs prices and offers, receiptq stores them
/// per transaction (integers in milli-units), and the resources, the events and the customer view
/// carry them; refunds Apple signs as prorated or as a family revoke take back only what they say.
@Suite("Money: prices, offers and partial refunds, end to end", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct MoneyTests {
    static let usd = CurrencyCode(rawValue: "USD")!

    /// Notifications to receiptq, and purchases posted, as the notification tests do them.
    let notifications = NotificationTests()

    func customer(_ system: TestSystem, _ user: String) async throws -> JSONValue? {
        try await system.get(path: "/client/customers/\(user)").1
    }

    /// The user's events of `type` once the events API lists `count` of them (nil: it did not).
    func events(_ system: TestSystem, user: String, type: String, count: Int) async throws -> [JSONValue]? {
        var found: [JSONValue] = []
        let listed = try await eventually(timeout: .seconds(30)) {
            found = try await system.get(path: "/client/events?user_identifier=\(user)&type=\(type)").1?["events"]?.arrayValue ?? []
            return found.count >= count
        }
        return listed ? found : nil
    }

    func ledger(_ system: TestSystem, _ transactionID: String) throws -> PostgresRow? {
        let connection = try system.postgres()
        defer { connection.close() }
        return try connection.query(
            """
            SELECT price_milli, currency, storefront, offer_type, offer_discount_type, offer_period, ownership_type, quantity,
                   cancellation_date, revocation_type, revocation_percentage, refunded_quantity, refunded_milli
            FROM in_app_purchases WHERE app_id = \(system.app.id) AND transaction_id = \(transactionID)
            """
        ).rows.first
    }

    @Test("A subscription bought with an introductory offer, then renewed: each transaction's price stored, both events carry it")
    func introOfferThenRenewal() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try notifications.subscribe(system)
        let user = "money-sub"
        let original = try await notifications.purchase(
            system, user: user, product: "com.example.monthly", days: 30, price: Money(milli: 990, currency: Self.usd),
            fields: ["offerType": .number(1), "offerDiscountType": .string("PAY_UP_FRONT"), "offerPeriod": .string("P1M")])
        system.mock.state.serverAPI.setRenewal(["renewalPrice": .number(9990)], originalTransactionID: original, environment: .sandbox)
        try system.mock.state.notifications.event(type: "DID_RENEW", transactionID: original, environment: .sandbox)

        let renewed = try #require(try await events(system, user: user, type: "subscription.renewed", count: 1)?.first)
        let renewal = try #require(renewed["transaction_id"]?.stringValue)
        #expect(renewal != original)
        // The renewal's event carries what it cost: the renewal price, no offer.
        #expect(renewed["data"]?["transaction"]?["price_milli"] == .number(9990))
        #expect(renewed["data"]?["transaction"]?["currency"]?.stringValue == "USD")
        #expect(renewed["data"]?["transaction"]?["offer_type"] == nil)
        #expect(renewed["data"]?["subscription"]?["price_milli"] == .number(9990))
        // The subscription resource: the latest transaction's price.
        let subscription = try await system.get(path: "/client/subscriptions?user_identifier=\(user)").1?["subscriptions"]?.arrayValue?.first
        #expect(subscription?["price_milli"] == .number(9990) && subscription?["currency"]?.stringValue == "USD")
        let started = try #require(try await events(system, user: user, type: "subscription.started", count: 1)?.first)
        #expect(started["data"]?["transaction"]?["price_milli"] == .number(990))
        #expect(started["data"]?["transaction"]?["offer_type"]?.stringValue == "introductory")
        #expect(started["data"]?["transaction"]?["offer_period"]?.stringValue == "P1M")
        #expect(started["data"]?["subscription"]?["price_milli"] == .number(990))

        // Stored per transaction, as integers.
        let bought = try #require(try ledger(system, original))
        #expect(bought.int("price_milli") == 990 && bought.string("currency") == "USD" && bought.int("offer_type") == 1)
        #expect(bought.string("offer_discount_type") == "PAY_UP_FRONT" && bought.string("storefront") == "USA")
        let next = try #require(try ledger(system, renewal))
        #expect(next.int("price_milli") == 9990 && next.string("currency") == "USD" && next.int("offer_type") == nil)

        // The customer view shows both prices.
        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let page = try await browser.get("/admin/customers?q=\(user)&by=user")
        #expect(page.status == 200)
        #expect(page.text.contains("0.99 USD") && page.text.contains("9.99 USD") && page.text.contains("introductory"))
    }

    @Test("A quantity-3 consumable refunded a third, prorated, by a signed REFUND: 2 left and still owned, the event has the amounts")
    func proratedRefund() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try notifications.subscribe(system)
        let user = "money-coins"
        let id = try await notifications.purchase(
            system, user: user, product: "com.example.coins", price: Money(milli: 29_970, currency: Self.usd),
            fields: ["quantity": .number(3), "type": .string("Consumable")])
        let before = try await customer(system, user)?["purchases"]?.arrayValue?.first
        #expect(before?["price_milli"] == .number(29_970) && before?["remaining_quantity"] == .number(3))

        try system.mock.state.notifications.event(
            type: "REFUND", transactionID: id, environment: .sandbox, delivery: .init(copies: 2), revocation: .prorated(33_333))
        let refunded = try #require(try await events(system, user: user, type: "purchase.refunded", count: 1))
        #expect(refunded.count == 1)
        let data = refunded.first?["data"]
        #expect(data?["refunded_milli"] == .number(9990))
        #expect(data?["currency"]?.stringValue == "USD")
        #expect(data?["revocation_type"]?.stringValue == "REFUND_PRORATED")
        #expect(data?["revocation_percentage"] == .number(33_333))
        #expect(data?["refunded_quantity"] == .number(1))
        #expect(data?["remaining_quantity"] == .number(2))

        // Still owned, with two units left.
        let purchases = try await customer(system, user)?["purchases"]?.arrayValue ?? []
        #expect(purchases.map { $0["transaction_id"]?.stringValue } == [id])
        #expect(purchases.first?["quantity"] == .number(3) && purchases.first?["remaining_quantity"] == .number(2))
        #expect(purchases.first?["refunded_milli"] == .number(9990) && purchases.first?["cancellation_date"] == nil)
        let row = try #require(try ledger(system, id))
        #expect(row.date("cancellation_date") == nil && row.string("revocation_type") == "REFUND_PRORATED")
        #expect(row.int("refunded_quantity") == 1 && row.int("refunded_milli") == 9990 && row.int("revocation_percentage") == 33_333)

        // Apple's two copies applied once: one event in the outbox.
        #expect(try await eventually { try system.queuesIdle([.notification]) })
        let connection = try system.postgres()
        defer { connection.close() }
        #expect(
            try await connection.query("SELECT count(*) AS n FROM events WHERE app_id = \(system.app.id) AND type = 'purchase.refunded'")
                .rows.first?.int("n") == 1)

        let browser = DashboardPagesTests.Browser(system)
        _ = try await browser.logIn()
        let page = try await browser.get("/admin/customers?q=\(user)&by=user")
        #expect(page.text.contains("REFUND_PRORATED 33.333 % · 1 of 3 · 9.99 USD"))
    }

    @Test("A family revoke ends the family member's access only; the purchaser keeps theirs, and no money is said refunded")
    func familyRevoke() async throws {
        let system = try await TestSystem.start()
        defer { Task { await system.stop() } }
        _ = try notifications.subscribe(system)
        let ownerID = try await notifications.purchase(
            system, user: "money-parent", product: "com.example.lifetime", price: Money(milli: 4990, currency: Self.usd))
        let memberID = try await notifications.purchase(
            system, user: "money-child", product: "com.example.lifetime", price: Money(milli: 4990, currency: Self.usd),
            fields: ["inAppOwnershipType": .string("FAMILY_SHARED")])

        try system.mock.state.notifications.event(type: "REVOKE", transactionID: memberID, environment: .sandbox)
        let revoked = try #require(try await events(system, user: "money-child", type: "purchase.refunded", count: 1))
        #expect(revoked.first?["data"]?["revocation_type"]?.stringValue == "FAMILY_REVOKE")
        #expect(revoked.first?["data"]?["refunded_milli"] == nil)
        #expect(try await customer(system, "money-child")?["purchases"]?.arrayValue?.isEmpty == true)
        #expect(try await customer(system, "money-parent")?["purchases"]?.arrayValue?.map { $0["transaction_id"]?.stringValue } == [ownerID])
        let memberRow = try #require(try ledger(system, memberID))
        #expect(memberRow.string("ownership_type") == "FAMILY_SHARED" && memberRow.string("revocation_type") == "FAMILY_REVOKE")
        #expect(memberRow.date("cancellation_date") != nil && memberRow.int("refunded_milli") == nil)
        let ownerRow = try #require(try ledger(system, ownerID))
        #expect(ownerRow.date("cancellation_date") == nil && ownerRow.string("revocation_type") == nil)
        // Every notification's job settled: one refund event in all (the member's), none for the
        // purchaser, read from the outbox itself (the events API may still hold back a fresh one).
        #expect(try await eventually { try system.queuesIdle([.notification]) })
        let connection = try system.postgres()
        defer { connection.close() }
        let refunds = try await connection.query(
            "SELECT user_identifier FROM events WHERE app_id = \(system.app.id) AND type = 'purchase.refunded'"
        ).rows.map { $0.string("user_identifier") }
        #expect(refunds == ["money-child"])
    }
}
