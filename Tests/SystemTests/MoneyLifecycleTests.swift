import Conformance
import DevTools
import Foundation
import Libpq
import MockAppStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// Issue 43's whole story on one running system, on a simulated clock so that its days are real
/// calendar days: three customers over sixty days — an introductory offer renewed twice across a
/// price increase, a consumable of three refunded one unit prorated after Apple's consumption
/// request was answered, an offer code redeemed in the App Store by a user the app knows only by
/// app account token — and at the end the revenue of every day equal to a table computed by hand,
/// each user's entitlements by name, one consumption answer with the policy's values, every event
/// once.
@Suite("Money and identity: a scripted sixty days, revenue by hand", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct MoneyLifecycleTests {
    static let usd = CurrencyCode(rawValue: "USD")!
    let admin = AdminAPITests()
    let notifications = NotificationTests()

    /// One day's USD figures as the metrics endpoint states them (milli-units).
    struct Figures: Equatable, CustomStringConvertible {
        var gross: Int64 = 0
        var refunded: Int64 = 0
        var purchases: Int64 = 0
        var refunds: Int64 = 0
        var newSubscriptions: Int64 = 0
        var renewals: Int64 = 0
        var active: Int64
        var mrr: Int64
        var churned: Int64 = 0

        init(
            gross: Int64 = 0, refunded: Int64 = 0, purchases: Int64 = 0, refunds: Int64 = 0, newSubscriptions: Int64 = 0, renewals: Int64 = 0,
            active: Int64, mrr: Int64
        ) {
            (self.gross, self.refunded, self.purchases, self.refunds) = (gross, refunded, purchases, refunds)
            (self.newSubscriptions, self.renewals, self.active, self.mrr) = (newSubscriptions, renewals, active, mrr)
        }

        /// A day of the endpoint's answer; nil when a member is missing or net is not gross less refunds.
        init?(_ json: JSONValue) {
            func value(_ name: String) -> Int64? { json[name]?.intValue.map(Int64.init) }
            guard let gross = value("gross_milli"), let refunded = value("refunds_milli"), let purchases = value("purchases"),
                let refunds = value("refunds"), let new = value("new_subscriptions"), let renewals = value("renewals"),
                let active = value("active_subscriptions"), let mrr = value("mrr_milli"), let churned = value("churned"),
                value("net_milli") == gross - refunded
            else { return nil }
            self.init(
                gross: gross, refunded: refunded, purchases: purchases, refunds: refunds, newSubscriptions: new, renewals: renewals, active: active,
                mrr: mrr)
            self.churned = churned
        }

        /// A day on which nothing happened: the levels of the day before.
        var quietNextDay: Figures { Figures(active: active, mrr: mrr) }

        var description: String {
            "gross \(gross) refunded \(refunded) purchases \(purchases) refunds \(refunds) new \(newSubscriptions) renewals \(renewals) "
                + "active \(active) mrr \(mrr) churned \(churned)"
        }
    }

    /// The user's event types, oldest first, as the events API lists them.
    func eventTypes(_ system: TestSystem, _ user: String) async throws -> [String] {
        try await system.get(path: "/client/events?user_identifier=\(user)&limit=1000").1?["events"]?.arrayValue?
            .compactMap { $0["type"]?.stringValue } ?? []
    }

    func customer(_ system: TestSystem, _ user: String) async throws -> JSONValue? {
        try await system.get(path: "/client/customers/\(user)").1
    }

    func entitlements(_ system: TestSystem, _ user: String) async throws -> [String: Int] {
        var held: [String: Int] = [:]
        for entitlement in try await customer(system, user)?["entitlements"]?.arrayValue ?? [] {
            guard let id = entitlement["id"]?.stringValue else { continue }
            held[id] = entitlement["expires_date"]?["ms"]?.intValue ?? 0
        }
        return held
    }

    /// A StoreKit 2 purchase the app's device posts for `user`, bought and signed now on `clock`.
    func devicePurchase(
        _ system: TestSystem, clock: SimulatedClock, user: String, product: String, days: Double?, price: Int64,
        fields: [String: JSONValue] = [:]
    ) async throws -> (id: String, expires: Int?) {
        let (jws, payload) = try system.signedTransaction(
            product: product, days: days, price: Money(milli: price, currency: Self.usd), fields: fields, now: clock.now())
        let body = JSONValue.object(["signed_transaction": .string(jws), "user_identifier": .string(user)]).encodedText
        let (status, answer) = try await system.post(body, path: "/client/transactions")
        #expect(status == 200, "\(String(describing: answer))")
        return (try #require(payload["transactionId"]?.stringValue), payload["expiresDate"]?.intValue)
    }

    /// Whether Apple's `type` notification about `transactionID` has been applied by a worker (its
    /// row stored with an outcome, and no notification job left).
    func applied(_ system: TestSystem, type: String, count: Int = 1) async throws -> Bool {
        try await eventually(timeout: .seconds(30)) {
            let rows = try notifications.auditRows(system, type: type)
            let idle = try system.queuesIdle([.notification])
            return rows.count == count && rows.allSatisfy { $0.string("outcome") != nil } && idle
        }
    }

    @Test(
        "Sixty days of three customers: revenue per day equals the hand-computed table, entitlements by name, one consumption answer with the policy's values, every event once"
    )
    func sixtyDays() async throws {
        // 10:00 UTC of tomorrow: every step of a day stays on that calendar day.
        let midnight = (Date().timeIntervalSince1970 / 86_400).rounded(.down) * 86_400
        let start = Date(timeIntervalSince1970: midnight + 86_400 + 10 * 3_600)
        let clock = SimulatedClock(start: start)
        func at(day: Int, hour: Double = 10) { clock.jump(to: start.addingTimeInterval(Double(day) * 86_400 + (hour - 10) * 3_600)) }
        func dayText(_ day: Int) -> String { RevenueCalendar.text(start.addingTimeInterval(Double(day) * 86_400)) }

        let system = try await TestSystem.start(simulatedClock: clock.closure)
        defer { Task { await system.stop() } }
        let app = system.app.id.canonical
        _ = try notifications.subscribe(system)
        for (entitlement, products) in [("pro", #"["com.example.monthly", "com.example.yearly"]"#), ("lifetime", #"["com.example.lifetime"]"#)] {
            let defined = try await admin.send(
                system, "PUT", "/admin/api/apps/\(app)/entitlements/\(entitlement)", body: #"{"products": \#(products)}"#)
            #expect(defined.status == 200)
        }
        let policy = try await admin.send(system, "PUT", "/admin/api/apps/\(app)/consumption-policy", body: #"{"policy": "prefer_decline"}"#)
        #expect(policy.status == 200)

        // Day 0. A monthly subscription bought with an introductory offer: 0.99 for the first month.
        let (monthly, introEnds) = try await devicePurchase(
            system, clock: clock, user: "life-sub", product: "com.example.monthly", days: 30, price: 990,
            fields: ["offerType": .number(1), "offerDiscountType": .string("PAY_UP_FRONT"), "offerPeriod": .string("P1M")])
        // Three coins in one purchase (29.97), and a lifetime unlock (4.99), by another user, whose
        // backend states their consent and use for refund requests.
        let (coins, _) = try await devicePurchase(
            system, clock: clock, user: "life-coins", product: "com.example.coins", days: nil, price: 29_970,
            fields: ["quantity": .number(3), "type": .string("Consumable")])
        _ = try await devicePurchase(system, clock: clock, user: "life-coins", product: "com.example.lifetime", days: nil, price: 4_990)
        let statement = #"{"consented": true, "consumption_percentage": 25000, "sample_content_provided": true, "play_time_seconds": 5400}"#
        #expect(try await system.post(statement, path: "/client/users/life-coins/consumption", method: "PUT").0 == 200)

        // Day 1. The app registered a user's app account token; that user redeems an offer code in
        // the App Store (a year for 19.99): receiptq hears of it only from Apple's notification.
        at(day: 1)
        let token = UUID()
        let registered = try await admin.send(
            system, "PUT", "/client/users/life-offer/app-account-token", authorization: "Bearer \(system.token)",
            body: #"{"app_account_token": "\#(token.canonical)"}"#)
        #expect(registered.status == 200)
        let (_, offerPayload) = try system.signedTransaction(
            product: "com.example.yearly", days: 365, price: Money(milli: 19_990, currency: Self.usd),
            fields: [
                "appAccountToken": .string(token.canonical), "offerType": .number(3), "offerIdentifier": .string("SPRING"),
                "offerDiscountType": .string("PAY_UP_FRONT"), "offerPeriod": .string("P1Y"),
            ], now: clock.now())
        let offer = try #require(offerPayload["transactionId"]?.stringValue)
        let offerEnds = try #require(offerPayload["expiresDate"]?.intValue)
        try system.mock.state.notifications.event(type: "SUBSCRIBED", subtype: "INITIAL_BUY", transactionID: offer, environment: .sandbox)
        #expect(try await applied(system, type: "SUBSCRIBED"))
        #expect(try await entitlements(system, "life-offer") == ["pro": offerEnds])

        // Day 2. Apple asks how the coins were used before it decides a refund request: answered
        // once, under the app's policy, long before the 12 hours Apple gives.
        at(day: 2)
        let asked = clock.now()
        try system.mock.state.notifications.event(
            type: "CONSUMPTION_REQUEST", transactionID: coins, environment: .sandbox, delivery: .init(copies: 2))
        let consumption = { system.mock.state.serverAPI.support.consumptionRequests.filter { $0.transactionID == coins } }
        #expect(try await eventually(timeout: .seconds(30)) { consumption().count == 1 })
        #expect(clock.now() < asked.addingTimeInterval(12 * 3_600))
        #expect(
            consumption().first?.body
                == .object([
                    "customerConsented": .bool(true), "deliveryStatus": .string("DELIVERED"), "sampleContentProvided": .bool(true),
                    "consumptionPercentage": .number(25_000), "refundPreference": .string("DECLINE"),
                ]))

        // Day 3. Apple refunds one coin of three, prorated: 9.99 back, two coins still owned.
        at(day: 3)
        try system.mock.state.notifications.event(type: "REFUND", transactionID: coins, environment: .sandbox, revocation: .prorated(33_333))
        #expect(try await applied(system, type: "REFUND"))
        let coinsLeft = try await customer(system, "life-coins")?["purchases"]?.arrayValue?.first { $0["transaction_id"]?.stringValue == coins }
        #expect(coinsLeft?["remaining_quantity"] == .number(2) && coinsLeft?["refunded_milli"] == .number(9_990))

        // Day 30, an hour before the introductory month ends: the first renewal, at the full 9.99.
        at(day: 30, hour: 9)
        system.mock.state.serverAPI.setRenewal(["renewalPrice": .number(9_990)], originalTransactionID: monthly, environment: .sandbox)
        try system.mock.state.notifications.event(type: "DID_RENEW", transactionID: monthly, environment: .sandbox)
        #expect(try await applied(system, type: "DID_RENEW"))
        // A renewal's period follows the last one's end, a month (30 days) as the first.
        let month = 30 * 86_400_000
        let introEnd = try #require(introEnds)
        #expect(try await entitlements(system, "life-sub") == ["pro": introEnd + month])

        // Day 45. Apple announces 12.99 from the next renewal, and the customer accepts.
        at(day: 45)
        system.mock.state.serverAPI.setRenewal(
            ["renewalPrice": .number(12_990), "priceIncreaseStatus": .number(1)], originalTransactionID: monthly, environment: .sandbox)
        try system.mock.state.notifications.event(type: "PRICE_INCREASE", subtype: "ACCEPTED", transactionID: monthly, environment: .sandbox)
        #expect(try await applied(system, type: "PRICE_INCREASE"))

        // Day 60: the second renewal, at the new price.
        at(day: 60, hour: 9)
        try system.mock.state.notifications.event(type: "DID_RENEW", transactionID: monthly, environment: .sandbox)
        #expect(try await applied(system, type: "DID_RENEW", count: 2))

        // Entitlements by name: the subscriber until the second renewal's end, the offer code's user
        // for its year, the coins' buyer the lifetime unlock (a consumable unlocks nothing).
        #expect(try await entitlements(system, "life-sub") == ["pro": introEnd + 2 * month])
        #expect(try await entitlements(system, "life-offer") == ["pro": offerEnds])
        #expect(try await entitlements(system, "life-coins") == ["lifetime": 0])

        // The revenue of every day, by hand (USD milli-units; a year's plan is a twelfth a month,
        // 19,990 / 12 = 1,665.83 → 1,666):
        let byHand: [Int: Figures] = [
            // 0.99 intro + 29.97 coins + 4.99 lifetime; one new subscription, its MRR the intro price.
            0: Figures(gross: 35_950, purchases: 3, newSubscriptions: 1, active: 1, mrr: 990),
            // The offer code's year.
            1: Figures(gross: 19_990, purchases: 1, newSubscriptions: 1, active: 2, mrr: 990 + 1_666),
            // A third of 29.97 refunded; nothing bought that day.
            3: Figures(refunded: 9_990, refunds: 1, active: 2, mrr: 2_656),
            // The first renewal replaces the intro price in the MRR.
            30: Figures(gross: 9_990, purchases: 1, renewals: 1, active: 2, mrr: 9_990 + 1_666),
            // The second, at the increased price.
            60: Figures(gross: 12_990, purchases: 1, renewals: 1, active: 2, mrr: 12_990 + 1_666),
        ]
        var expected: [String: Figures] = [:]
        var level = Figures(active: 0, mrr: 0)
        for day in 0...60 {
            level = byHand[day] ?? level.quietNextDay
            expected[dayText(day)] = level
        }
        var stated: [String: Figures] = [:]
        var other: [JSONValue] = []
        let path = "/admin/api/apps/\(app)/metrics?from=\(dayText(0))&to=\(dayText(60))"
        let agreed = try await eventually(timeout: .seconds(30)) {
            let days = try await admin.send(system, "GET", path).json?["days"]?.arrayValue ?? []
            stated = Dictionary(days.compactMap { day in day["day"]?.stringValue.flatMap { key in Figures(day).map { (key, $0) } } }) { a, _ in a }
            other = days.filter { $0["currency"]?.stringValue != "USD" }
            return stated == expected
        }
        #expect(
            agreed,
            "days that differ: \(expected.keys.sorted().filter { stated[$0] != expected[$0] }.map { "\($0): \(stated[$0].map(String.init(describing:)) ?? "none")" })"
        )
        #expect(other.isEmpty, "only USD was charged: \(other)")

        // Every event once, in order, per user.
        let expectedEvents: [String: [String]] = [
            // The device's post is validated and starts the subscription; Apple's renewals renew it (a
            // price increase changes no entitlement: it is stated by the next renewal's price).
            "life-sub": ["receipt.validated", "subscription.started", "subscription.renewed", "subscription.renewed"],
            "life-coins": ["receipt.validated", "receipt.validated", "refund.consumption_sent", "purchase.refunded"],
            // Known to the app only by token: Apple's notification starts the subscription, no receipt was posted.
            "life-offer": ["subscription.started"],
        ]
        var listed: [String: [String]] = [:]
        let allListed = try await eventually(timeout: .seconds(30)) {
            for user in expectedEvents.keys { listed[user] = try await eventTypes(system, user) }
            return listed == expectedEvents
        }
        #expect(allListed, "\(listed)")
        // Nothing more waits to be said: every job settled, and the outbox holds no other event of theirs.
        #expect(try await eventually(timeout: .seconds(30)) { try system.queuesIdle() })
        let connection = try system.postgres()
        defer { connection.close() }
        let outbox = try await connection.query("SELECT count(*) AS n FROM events WHERE app_id = \(system.app.id)").rows.first?.int("n")
        #expect(outbox == expectedEvents.values.map(\.count).reduce(0, +))
        // The offer code's purchase is the token's user's, with its offer and price as Apple signed them.
        let redeemed = try await connection.query(
            """
            SELECT user_identifier, offer_type, offer_identifier, price_milli, currency FROM in_app_purchases
            WHERE app_id = \(system.app.id) AND transaction_id = \(offer)
            """
        ).rows.first
        #expect(redeemed?.string("user_identifier") == "life-offer" && redeemed?.int("offer_type") == 3)
        #expect(redeemed?.string("offer_identifier") == "SPRING" && redeemed?.int("price_milli") == 19_990 && redeemed?.string("currency") == "USD")
    }
}
