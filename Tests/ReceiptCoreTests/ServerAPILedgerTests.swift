import Foundation
import ReceiptCore
import Testing

@Suite("Server API answers reduced to purchases and subscription states")
struct ServerAPILedgerTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func ms(_ offset: TimeInterval) -> JSONValue { .number(((now.timeIntervalSince1970 + offset) * 1000).rounded()) }

    func transaction(_ id: String, original: String = "100", expiresIn: TimeInterval? = 86_400, extra: [String: JSONValue] = [:]) -> JSONValue {
        var object: [String: JSONValue] = [
            "transactionId": .string(id), "originalTransactionId": .string(original), "productId": .string("monthly"),
            "bundleId": .string("com.example.a"), "purchaseDate": ms(-86_400), "originalPurchaseDate": ms(-90 * 86_400),
            "quantity": .number(1), "type": .string("Auto-Renewable Subscription"), "webOrderLineItemId": .string("w\(id)"),
        ]
        if let expiresIn { object["expiresDate"] = ms(expiresIn) }
        return .object(object.merging(extra) { _, new in new })
    }

    @Test("Apple's status 1–5 maps onto the subscription model, with the renewal info's fields")
    func statuses() throws {
        let renewal: JSONValue = .object([
            "autoRenewStatus": .number(0), "autoRenewProductId": .string("yearly"), "isInBillingRetryPeriod": .bool(true),
            "gracePeriodExpiresDate": ms(3600), "expirationIntent": .number(2),
        ])
        let cases: [(Int, SubscriptionStatus)] = [(1, .active), (2, .expired), (3, .billingRetry), (4, .grace), (5, .revoked)]
        for (status, expected) in cases {
            let item = ServerAPIStatusItem(
                status: status, originalTransactionID: "100",
                transaction: transaction("2", extra: status == 5 ? ["revocationDate": ms(-60), "revocationReason": .number(1)] : [:]),
                renewal: renewal)
            let ledger = ServerAPILedger.build(environment: "production", transactions: [], statuses: [item], at: now)
            let state = try #require(ledger.subscriptions.first)
            #expect(state.status == expected, "status \(status)")
            #expect(state.autoRenewStatus == false)
            #expect(state.autoRenewProductID == "yearly")
            #expect(state.isInBillingRetry)
            #expect(state.gracePeriodExpiresAt == now.addingTimeInterval(3600))
            #expect(state.expirationIntent == (expected == .expired || expected == .billingRetry ? 2 : nil))
            #expect(state.latestTransactionID == "2")
            if status == 5 {
                #expect(state.revokedAt == now.addingTimeInterval(-60))
                #expect(state.cancellationReason == 1)
                #expect(!state.isEntitled(at: now))
            }
        }
    }

    @Test("History and statuses give each transaction once; a subscription without a status is judged by its dates; an upgrade is upgraded")
    func history() throws {
        let history = [
            transaction("1", expiresIn: -86_400), transaction("2"), transaction("3", original: "300", expiresIn: -3600),
            transaction("9", original: "900", expiresIn: nil, extra: ["type": .string("Consumable")]),
        ]
        let upgraded = ServerAPIStatusItem(
            status: 2, originalTransactionID: "500", transaction: transaction("5", original: "500", extra: ["isUpgraded": .bool(true)]),
            renewal: nil)
        let ledger = ServerAPILedger.build(
            environment: "sandbox", transactions: history,
            statuses: [ServerAPIStatusItem(status: 1, originalTransactionID: "100", transaction: transaction("2"), renewal: nil), upgraded],
            at: now)
        #expect(ledger.purchases.map(\.transactionID) == ["1", "2", "3", "9", "5"])
        #expect(ledger.subscriptions.map(\.originalTransactionID) == ["100", "300", "500"])
        #expect(ledger.subscriptions.map(\.status) == [.active, .expired, .upgraded])
        let consumable = try #require(ledger.purchases.first { $0.transactionID == "9" })
        #expect(consumable.expiresDate == nil)
        #expect(consumable.webOrderLineItemID == "w9")
    }

    @Test("Offers: an introductory offer is a trial unless Apple names another discount; a promotional offer keeps its id")
    func offers() throws {
        let trial = try #require(InAppPurchase(serverAPITransaction: transaction("1", extra: ["offerType": .number(1)])))
        #expect(trial.isTrialPeriod && trial.isInIntroOfferPeriod)
        let payAsYouGo = try #require(
            InAppPurchase(serverAPITransaction: transaction("2", extra: ["offerType": .number(1), "offerDiscountType": .string("PAY_AS_YOU_GO")])))
        #expect(!payAsYouGo.isTrialPeriod && payAsYouGo.isInIntroOfferPeriod)
        let promotional = try #require(
            InAppPurchase(serverAPITransaction: transaction("3", extra: ["offerType": .number(2), "offerIdentifier": .string("winback")])))
        #expect(promotional.promotionalOfferID == "winback")
        #expect(InAppPurchase(serverAPITransaction: .object(["transactionId": .string("x")])) == nil)
    }
}
