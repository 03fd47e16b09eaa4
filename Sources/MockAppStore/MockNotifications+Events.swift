import Foundation
import ReceiptCore

extension MockNotificationCenter {
    /// Something happens to a purchase in the mock App Store, as it would at Apple: the ledger the
    /// Server API answers from changes, then the notification goes out.
    ///
    /// - `REFUND` / `REVOKE`: the transaction gets `revocationDate` (now), `revocationReason`
    ///   (1 for a refund: an issue with the app; 0 for a revocation), `revocationType` and
    ///   `revocationPercentage` (`revocation`, else `REFUND_FULL` at 100000 for a refund and
    ///   `FAMILY_REVOKE` for a revocation); `REFUND_REVERSED` removes them.
    /// - `DID_RENEW`: a new transaction of the subscription, for the next period of the same length
    ///   (or `period` seconds: a month after a week's free trial), at the renewal info's
    ///   `renewalPrice` (else the last price) and without the last offer, of the renewal info's
    ///   `autoRenewProductId` when set (a downgrade or crossgrade the customer chose).
    /// - `EXPIRED`: the latest period ends now and auto-renew is off (`expirationIntent` 1); with
    ///   `BILLING_RETRY`, billing retry ends (`expirationIntent` 2, auto-renew as it was).
    /// - `DID_FAIL_TO_RENEW`: the period ends now, billing retry starts (`GRACE_PERIOD`: with 16
    ///   days of grace).
    /// - `EXPIRED` `PRICE_INCREASE`: the period ends now, the price increase not consented
    ///   (`expirationIntent` 3, auto-renew as it was).
    /// - `RENEWAL_EXTENDED`: the latest period ends `period` seconds later.
    /// - `PRICE_INCREASE`: `priceIncreaseStatus` 0 (`PENDING`) or 1 (`ACCEPTED`); the new price is
    ///   the renewal info's `renewalPrice`, set beforehand with `setRenewal`.
    /// - `SUBSCRIBED`, `OFFER_REDEEMED`: the subscription renews again (`autoRenewStatus` 1, no
    ///   `expirationIntent`); its new transaction is recorded beforehand, as the device bought it.
    /// - `DID_CHANGE_RENEWAL_STATUS`: `AUTO_RENEW_DISABLED` / `AUTO_RENEW_ENABLED`.
    /// - Anything else: sent about the transaction as it stands.
    /// - Returns: the notification's UUID, or nil when the transaction is unknown.
    @discardableResult
    public func event(
        type: String, subtype: String? = nil, transactionID: String, environment: AppStoreEnvironment, delivery: Delivery = Delivery(),
        revocation: Revocation? = nil, period: TimeInterval? = nil
    ) throws -> String? {
        guard var transaction = api.transaction(transactionID, in: environment) else { return nil }
        let now = api.nowMilliseconds
        let original = transaction["originalTransactionId"]?.stringValue ?? transactionID
        switch type {
        case "REFUND", "REVOKE":
            transaction =
                api.update(transaction: transactionID, in: environment) {
                    let revocation = revocation ?? (type == "REFUND" ? Revocation(type: "REFUND_FULL", percentageMilli: 100_000) : .familyRevoke)
                    $0["revocationDate"] = .number(now)
                    $0["revocationReason"] = .number(type == "REFUND" ? 1 : 0)
                    $0["revocationType"] = .string(revocation.type)
                    $0["revocationPercentage"] = revocation.percentageMilli.map { .number(Double($0)) }
                } ?? transaction
        case "REFUND_REVERSED":
            transaction =
                api.update(transaction: transactionID, in: environment) {
                    for field in ["revocationDate", "revocationReason", "revocationType", "revocationPercentage"] { $0[field] = nil }
                } ?? transaction
        case "DID_RENEW":
            let latest = api.subscription(original, among: api.history(of: transactionID, in: environment) ?? [], in: environment)?.latest
            let base = latest ?? transaction
            let start = MockServerAPI.expires(base)
            let length =
                period.map { $0 * 1000 } ?? max(60_000, start - (base["purchaseDate"]?.stringValue.flatMap(Double.init) ?? start - 2_592_000_000))
            var renewed = base.objectValue ?? [:]
            let id = String(UInt64(Date().timeIntervalSince1970 * 1_000_000) &* 10 &+ UInt64.random(in: 0...9))
            renewed["transactionId"] = .string(id)
            renewed["webOrderLineItemId"] = .string(String(UInt64(id)! &+ 1))
            renewed["purchaseDate"] = .number(max(start, now - 1000))
            renewed["expiresDate"] = .number(max(start, now - 1000) + length)
            renewed["transactionReason"] = .string("RENEWAL")
            // A renewal is charged the renewal price, past the offer the first period had.
            for field in ["offerType", "offerIdentifier", "offerDiscountType", "offerPeriod"] { renewed[field] = nil }
            let renewal = api.renewal(of: original, in: environment)
            if let price = renewal["renewalPrice"] { renewed["price"] = price }
            // A pending downgrade or crossgrade (the renewal info's `autoRenewProductId`) takes effect now.
            if let next = renewal["autoRenewProductId"] { renewed["productId"] = next }
            api.add(transactions: [.object(renewed)], environment: environment)
            api.setRenewal(["isInBillingRetryPeriod": .bool(false)], originalTransactionID: original, environment: environment)
            transaction = .object(renewed)
        case "EXPIRED", "DID_FAIL_TO_RENEW":
            // Every period of the subscription still running (a renewal already charged included) ends now.
            for running in api.history(of: transactionID, in: environment) ?? []
            where running["originalTransactionId"]?.stringValue == original && MockServerAPI.expires(running) > now {
                guard let id = running["transactionId"]?.stringValue else { continue }
                let ended = api.update(transaction: id, in: environment) { $0["expiresDate"] = .number(now - 1000) }
                if id == transactionID, let ended { transaction = ended }
            }
            if type == "EXPIRED", subtype == "BILLING_RETRY" || subtype == "PRICE_INCREASE" {
                // Billing retry gave up, or the customer never consented to a price increase: auto-renew was
                // never turned off (expiration intent 2, a billing error; 3, the increase not consented).
                let autoRenew = api.renewal(of: original, in: environment)["autoRenewStatus"] ?? .number(1)
                api.setRenewal(
                    [
                        "autoRenewStatus": autoRenew, "expirationIntent": .number(subtype == "BILLING_RETRY" ? 2 : 3),
                        "isInBillingRetryPeriod": .bool(false),
                    ], originalTransactionID: original, environment: environment)
            } else if type == "EXPIRED" {
                api.setRenewal(
                    ["autoRenewStatus": .number(0), "expirationIntent": .number(1), "isInBillingRetryPeriod": .bool(false)],
                    originalTransactionID: original, environment: environment)
            } else {
                var fields: [String: JSONValue] = ["isInBillingRetryPeriod": .bool(true), "expirationIntent": .number(2)]
                if subtype == "GRACE_PERIOD" { fields["gracePeriodExpiresDate"] = .number(now + 16 * 86_400_000) }
                api.setRenewal(fields, originalTransactionID: original, environment: environment)
            }
        case "RENEWAL_EXTENDED":
            // The latest period ends `period` seconds later, without a charge.
            if let period, let latest = api.latestTransaction(of: original, in: environment), let id = latest["transactionId"]?.stringValue {
                transaction =
                    api.update(transaction: id, in: environment) { $0["expiresDate"] = .number(MockServerAPI.expires(latest) + period * 1000) }
                    ?? transaction
            }
        case "PRICE_INCREASE":
            // Apple's `priceIncreaseStatus`: 0 while the customer has not answered, 1 once consented.
            api.setRenewal(
                ["priceIncreaseStatus": .number(subtype == "ACCEPTED" ? 1 : 0)], originalTransactionID: original, environment: environment)
        case "SUBSCRIBED", "OFFER_REDEEMED":
            // A new or resumed subscription: renewing, no longer expired.
            api.setRenewal(
                ["autoRenewStatus": .number(1), "expirationIntent": .null, "isInBillingRetryPeriod": .bool(false)],
                originalTransactionID: original, environment: environment)
        case "DID_CHANGE_RENEWAL_STATUS":
            api.setRenewal(
                ["autoRenewStatus": .number(subtype == "AUTO_RENEW_DISABLED" ? 0 : 1)], originalTransactionID: original, environment: environment)
        default:
            break
        }
        let bundleID = transaction["bundleId"]?.stringValue ?? ""
        guard transaction["expiresDate"] != nil else {
            return try notify(
                type: type, subtype: subtype, transaction: transaction, bundleID: bundleID, environment: environment, delivery: delivery)
        }
        let current = api.subscription(original, among: api.history(of: transactionID, in: environment) ?? [transaction], in: environment)
        return try notify(
            type: type, subtype: subtype,
            // A refund is about the refunded transaction; the rest about the subscription's latest.
            transaction: ["DID_RENEW", "REFUND", "REVOKE", "REFUND_REVERSED"].contains(type) ? transaction : current?.latest ?? transaction,
            renewal: current?.renewal, status: current?.status, bundleID: bundleID, environment: environment, delivery: delivery)
    }
}

extension MockNotificationCenter {
    /// How a `REFUND` or `REVOKE` takes the transaction back (Apple's `revocationType` and
    /// `revocationPercentage`, milli-percent).
    public struct Revocation: Sendable {
        public var type: String
        public var percentageMilli: Int?

        /// Creates a revocation.
        public init(type: String, percentageMilli: Int? = nil) {
            self.type = type
            self.percentageMilli = percentageMilli
        }

        /// A prorated refund of `percentageMilli` (33333: a third).
        public static func prorated(_ percentageMilli: Int) -> Revocation { Revocation(type: "REFUND_PRORATED", percentageMilli: percentageMilli) }

        /// A family member's access withdrawn.
        public static let familyRevoke = Revocation(type: "FAMILY_REVOKE")
    }
}
