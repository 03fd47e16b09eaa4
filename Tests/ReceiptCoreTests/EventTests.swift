import Foundation
import ReceiptTesting
import Testing

@testable import ReceiptCore

@Suite("Events derived from subscription changes")
struct EventTests {
    static let t0 = Date(timeIntervalSince1970: 1_790_000_000)

    static func state(
        _ status: SubscriptionStatus = .active, product: String = "monthly", latest: String = "t1", expires: TimeInterval = 30,
        purchased: TimeInterval = 0, autoRenew: Bool? = true, autoRenewProduct: String? = "monthly", retry: Bool = false,
        grace: Date? = nil, revoked: Date? = nil, ownership: String? = "PURCHASED", observed: TimeInterval = 0
    ) -> SubscriptionState {
        SubscriptionState(
            originalTransactionID: "t1", productID: product, status: status, expiresAt: t0.addingTimeInterval(expires * 86_400),
            purchasedAt: t0.addingTimeInterval(purchased * 86_400), originalPurchaseDate: t0, autoRenewStatus: autoRenew,
            autoRenewProductID: autoRenewProduct, isInBillingRetry: retry, gracePeriodExpiresAt: grace, ownershipType: ownership,
            latestTransactionID: latest, revokedAt: revoked, observedAt: t0.addingTimeInterval(observed * 86_400))
    }

    static func types(_ before: SubscriptionState?, _ after: SubscriptionState) -> [String] {
        SubscriptionChange.between(before, after).map(\.type.rawValue)
    }

    @Test("Each kind of change becomes its event, in the order a backend applies them")
    func kinds() {
        let active = Self.state()
        #expect(Self.types(nil, active) == ["subscription.started"])
        #expect(Self.types(nil, Self.state(.expired)) == ["subscription.started", "subscription.expired"])
        #expect(Self.types(active, Self.state(observed: 1)) == [], "the same state observed again is no news")
        #expect(Self.types(active, Self.state(latest: "t2", expires: 60, purchased: 30, observed: 30)) == ["subscription.renewed"])
        #expect(
            Self.types(active, Self.state(product: "yearly", latest: "t2", expires: 365, purchased: 10, observed: 10))
                == ["subscription.upgraded"])
        #expect(
            Self.types(active, Self.state(product: "basic", latest: "t2", expires: 60, purchased: 30, autoRenewProduct: "basic", observed: 30))
                == ["subscription.product_changed"])
        #expect(Self.types(active, Self.state(autoRenewProduct: "basic", observed: 2)) == ["subscription.product_changed"])
        #expect(Self.types(active, Self.state(autoRenew: false, observed: 2)) == ["subscription.auto_renew_changed"])
        // Stored from the device's signed transaction alone, auto-renew unknown: off is news, on is not.
        let unknown = Self.state(autoRenew: nil)
        #expect(Self.types(unknown, Self.state(autoRenew: false, observed: 2)) == ["subscription.auto_renew_changed"])
        #expect(Self.types(unknown, Self.state(autoRenew: true, observed: 2)) == [])
        #expect(Self.types(active, Self.state(.billingRetry, retry: true, observed: 30)) == ["subscription.billing_issue"])
        #expect(
            Self.types(active, Self.state(.grace, retry: true, grace: Self.t0.addingTimeInterval(36 * 86_400), observed: 30))
                == ["subscription.billing_issue", "subscription.grace_period_started"])
        #expect(
            Self.types(Self.state(.billingRetry, retry: true), Self.state(latest: "t2", expires: 65, purchased: 35, observed: 35))
                == ["subscription.billing_recovered", "subscription.renewed"])
        #expect(Self.types(active, Self.state(expires: 40, observed: 3)) == ["subscription.extended"])
        #expect(
            Self.types(active, Self.state(.expired, autoRenew: false, observed: 31)) == ["subscription.auto_renew_changed", "subscription.expired"])
        let refundDate = Self.t0.addingTimeInterval(5 * 86_400)
        #expect(Self.types(active, Self.state(.revoked, revoked: refundDate, observed: 5)) == ["subscription.refunded"])
        #expect(
            Self.types(active, Self.state(.revoked, revoked: refundDate, ownership: "FAMILY_SHARED", observed: 5)) == ["subscription.revoked"])
        #expect(Self.types(active, Self.state(revoked: refundDate, observed: 5)) == ["subscription.refunded"], "one period refunded")
        #expect(SubscriptionChange.between(active, Self.state(.revoked, revoked: refundDate, observed: 5)).first?.occurredAt == refundDate)
    }

    @Test("What changed is listed field by field, with from and to")
    func fields() {
        let before = Self.state()
        let after = Self.state(latest: "t2", expires: 60, purchased: 30, observed: 30)
        let fields = Dictionary(uniqueKeysWithValues: SubscriptionChange.fields(before, after).map { ($0.name, ($0.from, $0.to)) })
        #expect(Set(fields.keys) == ["latest_transaction_id", "expires_date"])
        #expect(fields["latest_transaction_id"]?.0 == .string("t1"))
        #expect(fields["latest_transaction_id"]?.1 == .string("t2"))
    }

    @Test("Filters: exact types, families and *; nothing else")
    func patterns() {
        #expect(EventType.subscriptionRenewed.matches("subscription.*"))
        #expect(EventType.subscriptionRenewed.matches("*"))
        #expect(!EventType.receiptValidated.matches("subscription.*"))
        #expect(EventType.isValidPattern("purchase.refunded"))
        #expect(!EventType.isValidPattern("purchase.nope"))
        #expect(!EventType.isValidPattern("subscription"))
    }

    @Test("Ids made in one millisecond still sort in the order they were made, and are UUIDv7")
    func monotonicIDs() {
        var ids = MonotonicEventIDs()
        let at = Date()
        let made = (0..<1000).map { _ in ids.next(at: at) }
        #expect(made.map(\.canonical) == made.map(\.canonical).sorted())
        #expect(Set(made).count == made.count)
        #expect(made.allSatisfy { $0.canonical.dropFirst(14).first == "7" })
        #expect(made[0].canonical == made[0].uuidString.lowercased())
        // RFC 9562's layout: the millisecond in the first 48 bits, the variant bits 10.
        let ms = String(UInt64(at.timeIntervalSince1970 * 1000), radix: 16)
        let hex = made[0].canonical.replacingOccurrences(of: "-", with: "")
        #expect(hex.prefix(12) == String(repeating: "0", count: 12 - ms.count) + ms)
        #expect(made.allSatisfy { "89ab".contains($0.canonical.dropFirst(19).first!) })
        // A later millisecond starts afresh, after every id before it.
        let later = ids.next(at: at.addingTimeInterval(0.002))
        #expect(later.canonical > made.last!.canonical)
    }

    @Test("The canonical text is Foundation's, lower-cased, for any id, and reads back as the same id")
    func canonicalText() {
        var generator = SeededGenerator(seed: 9562)
        let edges = [UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), UUID(uuidString: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!]
        let random = (0..<2_000).map { _ in
            let b = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
            return UUID(uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]))
        }
        for id in edges + random {
            #expect(id.canonical == id.uuidString.lowercased())
            #expect(UUID(uuidString: id.canonical) == id)
        }
    }
}
