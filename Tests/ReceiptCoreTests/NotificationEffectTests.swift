import Foundation
import ReceiptCore
import ReceiptTesting
import Testing

/// What each App Store Server Notification changes, as pure decisions: every documented V2 type and
/// subtype onto receiptq's subscription states and ledger, V1 bodies (Apple's real samples) like a
/// `verifyReceipt` answer, and types not known yet kept rather than failed.
@Suite("Notification effects")
struct NotificationEffectTests {
    static let signed = Date(timeIntervalSince1970: 1_780_000_000)

    static func ms(_ date: Date) -> JSONValue { .number((date.timeIntervalSince1970 * 1000).rounded()) }

    /// A subscription transaction whose period runs `from`…`to` seconds around the signed date.
    static func transaction(from: Double = -86_400, to: Double = 29 * 86_400, revoked: Bool = false, upgraded: Bool = false) -> JSONValue {
        var object: [String: JSONValue] = [
            "transactionId": .string("2000000002"), "originalTransactionId": .string("2000000001"), "bundleId": .string("com.example.app"),
            "productId": .string("com.example.monthly"), "purchaseDate": ms(signed.addingTimeInterval(from)),
            "originalPurchaseDate": ms(signed.addingTimeInterval(-90 * 86_400)), "expiresDate": ms(signed.addingTimeInterval(to)),
            "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"), "quantity": .number(1),
        ]
        if revoked {
            object["revocationDate"] = ms(signed.addingTimeInterval(-60))
            object["revocationReason"] = .number(1)
        }
        if upgraded { object["isUpgraded"] = .bool(true) }
        return .object(object)
    }

    static func notification(
        _ type: String, _ subtype: String? = nil, transaction: JSONValue? = transaction(), renewal: JSONValue? = nil, status: Int? = nil
    ) -> AppleNotification {
        AppleNotification(
            version: .v2, uuid: UUID().uuidString, type: type, subtype: subtype, signedDate: signed, environment: "production",
            transaction: transaction, renewal: renewal, status: status)
    }

    /// Each documented type and subtype, without `data.status` (older notifications), and the
    /// state it leaves the subscription in.
    static let cases: [(type: String, subtype: String?, transaction: JSONValue, renewal: JSONValue?, state: SubscriptionStatus)] = [
        ("SUBSCRIBED", "INITIAL_BUY", transaction(), nil, .active),
        ("SUBSCRIBED", "RESUBSCRIBE", transaction(), nil, .active),
        ("DID_RENEW", nil, transaction(), nil, .active),
        ("DID_RENEW", "BILLING_RECOVERY", transaction(), nil, .active),
        ("DID_CHANGE_RENEWAL_PREF", "UPGRADE", transaction(upgraded: true), nil, .upgraded),
        ("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", transaction(), nil, .active),
        ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", transaction(), nil, .active),
        ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", transaction(), nil, .active),
        ("DID_FAIL_TO_RENEW", "GRACE_PERIOD", transaction(from: -30 * 86_400, to: -60), nil, .grace),
        ("DID_FAIL_TO_RENEW", nil, transaction(from: -30 * 86_400, to: -60), nil, .billingRetry),
        ("GRACE_PERIOD_EXPIRED", nil, transaction(from: -30 * 86_400, to: -20 * 86_400), nil, .billingRetry),
        (
            "GRACE_PERIOD_EXPIRED", nil, transaction(from: -30 * 86_400, to: -20 * 86_400), .object(["isInBillingRetryPeriod": .bool(false)]),
            .expired
        ),
        ("EXPIRED", "VOLUNTARY", transaction(from: -30 * 86_400, to: -60), nil, .expired),
        ("EXPIRED", "BILLING_RETRY", transaction(from: -90 * 86_400, to: -60 * 86_400), nil, .expired),
        ("EXPIRED", "PRICE_INCREASE", transaction(from: -30 * 86_400, to: -60), nil, .expired),
        ("EXPIRED", "PRODUCT_NOT_FOR_SALE", transaction(from: -30 * 86_400, to: -60), nil, .expired),
        ("OFFER_REDEEMED", "UPGRADE", transaction(), nil, .active),
        ("PRICE_INCREASE", "PENDING", transaction(), nil, .active),
        ("PRICE_INCREASE", "ACCEPTED", transaction(), nil, .active),
        ("REFUND", nil, transaction(revoked: true), nil, .revoked),
        ("REFUND_DECLINED", nil, transaction(), nil, .active),
        ("REFUND_REVERSED", nil, transaction(), nil, .active),
        ("REVOKE", nil, transaction(revoked: true), nil, .revoked),
        ("RENEWAL_EXTENDED", nil, transaction(), nil, .active),
        ("RENEWAL_EXTENSION", "FAILURE", transaction(), nil, .active),
        ("ONE_TIME_CHARGE", nil, transaction(), nil, .active),
        ("METADATA_UPDATE", nil, transaction(), nil, .active),
        ("MIGRATION", nil, transaction(), nil, .active),
        ("PRICE_CHANGE", nil, transaction(), nil, .active),
        // Apple adds types every year: one not known today is applied by what it states, never failed.
        ("A_TYPE_FROM_2027", nil, transaction(), nil, .active),
    ]

    @Test("Every documented type and subtype maps onto a subscription state and the ledger", arguments: cases.indices)
    func documentedTypes(_ index: Int) throws {
        let item = Self.cases[index]
        let effect = Self.notification(item.type, item.subtype, transaction: item.transaction, renewal: item.renewal).effect
        let state = try #require(effect.subscriptions.first, "\(item.type) \(item.subtype ?? "")")
        #expect(state.status == item.state, "\(item.type) \(item.subtype ?? "")")
        #expect(state.observedAt == Self.signed, "ordered by the notification's signed date")
        #expect(state.originalTransactionID == "2000000001")
        #expect(effect.purchases.map(\.transactionID) == ["2000000002"])
        #expect(effect.originalTransactionID == "2000000001")
    }

    @Test("Apple's data.status wins over what the type implies")
    func statusFromApple() {
        let effect = Self.notification("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", status: 4).effect
        #expect(effect.subscriptions.first?.status == .grace)
    }

    @Test("The renewal info's auto-renew, grace period and intent reach the state")
    func renewalInfo() {
        let graceEnds = Self.signed.addingTimeInterval(10 * 86_400)
        let renewal: JSONValue = .object([
            "originalTransactionId": .string("2000000001"), "autoRenewStatus": .number(0), "autoRenewProductId": .string("com.example.yearly"),
            "isInBillingRetryPeriod": .bool(true), "gracePeriodExpiresDate": Self.ms(graceEnds), "expirationIntent": .number(2),
        ])
        let state = Self.notification(
            "DID_FAIL_TO_RENEW", "GRACE_PERIOD", transaction: Self.transaction(from: -30 * 86_400, to: -60), renewal: renewal, status: 4
        ).effect.subscriptions.first
        #expect(state?.autoRenewStatus == false)
        #expect(state?.autoRenewProductID == "com.example.yearly")
        #expect(state?.isInBillingRetry == true)
        #expect(state?.gracePeriodExpiresAt == graceEnds)
    }

    @Test("A refund or revocation of a one-time purchase marks its ledger row with the date and reason; no subscription")
    func refundOfAOneTimePurchase() throws {
        for type in ["REFUND", "REVOKE"] {
            var object = Self.transaction(revoked: true).objectValue ?? [:]
            object["expiresDate"] = nil
            object["type"] = .string("Non-Consumable")
            object["revocationReason"] = .number(type == "REFUND" ? 1 : 0)
            let effect = Self.notification(type, transaction: .object(object)).effect
            #expect(effect.subscriptions.isEmpty)
            let purchase = try #require(effect.purchases.first)
            #expect(purchase.cancellationDate == Self.signed.addingTimeInterval(-60))
            #expect(purchase.cancellationReason == (type == "REFUND" ? 1 : 0))
        }
        // Reversed: the same transaction without a revocation, so the ledger row is owned again.
        var object = Self.transaction().objectValue ?? [:]
        object["expiresDate"] = nil
        let reversed = Self.notification("REFUND_REVERSED", transaction: .object(object)).effect
        #expect(reversed.purchases.first?.cancellationDate == nil)
        #expect(reversed.purchases.first?.cancellationReason == nil)
    }

    @Test("TEST, CONSUMPTION_REQUEST, EXTERNAL_PURCHASE_TOKEN and summaries change nothing")
    func informational() {
        #expect(!Self.notification("TEST", transaction: nil).effect.changesState)
        #expect(!Self.notification("CONSUMPTION_REQUEST").effect.changesState)
        #expect(Self.notification("CONSUMPTION_REQUEST").effect.originalTransactionID == "2000000001")
        #expect(!Self.notification("EXTERNAL_PURCHASE_TOKEN", "UNREPORTED", transaction: nil).effect.changesState)
        #expect(!Self.notification("RENEWAL_EXTENSION", "SUMMARY", transaction: nil).effect.changesState)
    }

    @Test("Apple's V1 samples decode and apply like a verifyReceipt answer; the password is never needed")
    func appleVersionOneSamples() throws {
        let root = try #require(TestEnvironment.appStoreTestData)
        let files = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("notifications").path)
            .filter { $0.contains("-v1-") }.sorted()
        #expect(files.count >= 6)
        for file in files {
            let body = try JSONValue.parse(Array(try Data(contentsOf: root.appendingPathComponent("notifications/\(file)"))))
            let notification = try #require(AppleNotification.v1(body: body, uuid: "v1-\(file)", receivedAt: Self.signed), "\(file)")
            #expect(notification.environment == "production" || notification.environment == "sandbox", "\(file)")
            #expect(notification.display["password"] == body["password"], "kept as received: the door removes it before")
            let effect = notification.effect
            #expect(!effect.purchases.isEmpty, "\(file): the unified receipt's transactions")
            #expect(!effect.subscriptions.isEmpty, "\(file): the subscription it is about")
            #expect(effect.subscriptions.allSatisfy { $0.observedAt == Self.signed })
            // Receipt data is shown truncated to operators.
            if let latest = notification.display["unified_receipt"]?["latest_receipt"]?.stringValue {
                #expect(latest.count < 64, "\(file)")
            }
        }
    }

    @Test("A body without a type is not a V1 notification")
    func notVersionOne() {
        #expect(AppleNotification.v1(body: .object(["password": .string("x")]), uuid: "u", receivedAt: Self.signed) == nil)
    }
}
