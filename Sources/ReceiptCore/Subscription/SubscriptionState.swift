import Foundation

/// Where an auto-renewable subscription stands, as Apple's last answer shows it.
public enum SubscriptionStatus: String, Sendable, Equatable, CaseIterable, Codable {
    /// Paid up: the current period has not ended.
    case active
    /// A renewal failed but Billing Grace Period keeps the user entitled until `grace_period_expires_at`.
    case grace
    /// A renewal failed and Apple is still trying to charge: not entitled, may recover.
    case billingRetry = "billing_retry"
    /// Ended; `expiration_intent` says why when Apple says.
    case expired
    /// Refunded or revoked from Family Sharing (`cancellation_date`): treated as never purchased.
    case revoked
    /// Cancelled by an upgrade to another subscription, which carries on under its own transaction.
    case upgraded

    /// Whether a state of this kind can entitle the user at all (`active` and `grace`).
    public var mayEntitle: Bool { self == .active || self == .grace }
}

/// One auto-renewable subscription, keyed by `original_transaction_id` (per app and environment),
/// computed purely from one `verifyReceipt` answer by ``SubscriptionState/states(from:at:)``.
public struct SubscriptionState: Sendable, Equatable {
    /// Stable across renewals: the subscription's key.
    public var originalTransactionID: String
    /// The product of the latest transaction.
    public var productID: String
    public var status: SubscriptionStatus
    /// When the latest transaction's period ends (or ended).
    public var expiresAt: Date?
    /// When the latest transaction's period began.
    public var purchasedAt: Date?
    public var originalPurchaseDate: Date?
    /// `auto_renew_status` of `pending_renewal_info`; nil when Apple did not say.
    public var autoRenewStatus: Bool?
    public var autoRenewProductID: String?
    public var isInBillingRetry: Bool
    public var gracePeriodExpiresAt: Date?
    /// 1 cancelled, 2 billing error, 3 declined a price increase, 4 product unavailable, 5 unknown.
    public var expirationIntent: Int?
    public var isTrial: Bool
    public var isIntro: Bool
    /// `PURCHASED` or `FAMILY_SHARED`, when Apple says.
    public var ownershipType: String?
    public var latestTransactionID: String
    /// The refund or revocation date of the latest transaction.
    public var revokedAt: Date?
    /// "1": the customer had an issue with the app; "0": another reason.
    public var cancellationReason: Int?
    /// When Apple gave the answer this state was computed from: a newer observation replaces an older one.
    public var observedAt: Date
    /// What the latest transaction cost, when Apple signed it (verifyReceipt has no price).
    public var price: Money?

    /// Creates a state (tests and the store build them; the worker computes them from Apple's answer).
    public init(
        originalTransactionID: String, productID: String, status: SubscriptionStatus, expiresAt: Date?, purchasedAt: Date? = nil,
        originalPurchaseDate: Date? = nil, autoRenewStatus: Bool? = nil, autoRenewProductID: String? = nil,
        isInBillingRetry: Bool = false, gracePeriodExpiresAt: Date? = nil, expirationIntent: Int? = nil, isTrial: Bool = false,
        isIntro: Bool = false, ownershipType: String? = nil, latestTransactionID: String, revokedAt: Date? = nil,
        cancellationReason: Int? = nil, observedAt: Date, price: Money? = nil
    ) {
        self.price = price
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.status = status
        self.expiresAt = expiresAt
        self.purchasedAt = purchasedAt
        self.originalPurchaseDate = originalPurchaseDate
        self.autoRenewStatus = autoRenewStatus
        self.autoRenewProductID = autoRenewProductID
        self.isInBillingRetry = isInBillingRetry
        self.gracePeriodExpiresAt = gracePeriodExpiresAt
        self.expirationIntent = expirationIntent
        self.isTrial = isTrial
        self.isIntro = isIntro
        self.ownershipType = ownershipType
        self.latestTransactionID = latestTransactionID
        self.revokedAt = revokedAt
        self.cancellationReason = cancellationReason
        self.observedAt = observedAt
    }

    /// Whether the user is entitled at `date`: active until `expiresAt`, or in grace until
    /// `gracePeriodExpiresAt`. Apple's last word may be old, so the dates decide, not the status alone.
    public func isEntitled(at date: Date) -> Bool {
        switch status {
        case .active: (expiresAt ?? .distantPast) > date
        case .grace: (gracePeriodExpiresAt ?? .distantPast) > date
        case .billingRetry, .expired, .revoked, .upgraded: false
        }
    }

    /// The length of the latest period (expiry minus purchase), when both are known and it is positive.
    /// Sandbox contracts time (a month lasts minutes), so re-poll timing scales with this.
    public var period: TimeInterval? {
        guard let expiresAt, let purchasedAt, expiresAt > purchasedAt else { return nil }
        return expiresAt.timeIntervalSince(purchasedAt)
    }
}

extension SubscriptionState {
    /// Every auto-renewable subscription in a `verifyReceipt` answer, computed at `date` (when the
    /// answer arrived).
    ///
    /// Reads `latest_receipt_info` (array, or the iOS 6 object), `latest_expired_receipt_info`
    /// (iOS 6, 21006) and `in_app`, de-duplicated by transaction id; a transaction with an expiry is
    /// a subscription's. Apple's order is not trusted: the latest transaction of each subscription is
    /// the one expiring last, unless an upgrade replaced it. `pending_renewal_info` is matched by
    /// `original_transaction_id`; iOS 6 answers carry its fields at the top level.
    /// - Returns: the states, ordered by original transaction id; empty unless the status is 0 or 21006.
    public static func states(from response: VerifyReceiptResponse, at date: Date) -> [SubscriptionState] {
        states(from: response, purchases: response.purchases, at: date)
    }

    /// ``states(from:at:)`` with the answer's ``VerifyReceiptResponse/purchases`` already read.
    public static func states(
        from response: VerifyReceiptResponse, purchases: [(purchase: InAppPurchase, json: JSONValue)], at date: Date
    ) -> [SubscriptionState] {
        guard response.status == 0 || response.status == 21006 else { return [] }
        var groups: [String: [(purchase: InAppPurchase, json: JSONValue)]] = [:]
        for (purchase, json) in purchases where purchase.expiresDate != nil {
            groups[purchase.originalTransactionID, default: []].append((purchase, json))
        }
        let pending = response.json["pending_renewal_info"]?.arrayValue ?? []
        return groups.keys.sorted().compactMap { originalTransactionID in
            guard let transactions = groups[originalTransactionID] else { return nil }
            // A transaction cancelled by an upgrade may still expire last (a yearly plan left for a
            // monthly one): it is the latest only when nothing replaced it.
            let current = transactions.filter { !($0.json["is_upgraded"]?.boolValue ?? false) }
            guard let latest = (current.isEmpty ? transactions : current).max(by: { isBefore($0.purchase, $1.purchase) }) else {
                return nil
            }
            let renewal =
                pending.first { $0["original_transaction_id"]?.stringValue == originalTransactionID }
                ?? pending.first { $0["original_transaction_id"] == nil && $0["product_id"]?.stringValue == latest.purchase.productID }
                // iOS 6: one subscription per receipt, its renewal fields beside `status`.
                ?? (pending.isEmpty && groups.count == 1 ? response.json : nil)
            return state(latest: latest, renewal: renewal, at: date)
        }
    }

    private static func state(latest: (purchase: InAppPurchase, json: JSONValue), renewal: JSONValue?, at date: Date) -> SubscriptionState {
        let purchase = latest.purchase
        let grace = renewal.flatMap { AppleDateFormat.date($0, "grace_period_expires_date") }
        let billingRetry = renewal?["is_in_billing_retry_period"]?.boolValue ?? false
        let isUpgraded = latest.json["is_upgraded"]?.boolValue ?? false
        let status: SubscriptionStatus
        if isUpgraded {
            status = .upgraded
        } else if purchase.cancellationDate != nil {
            status = .revoked
        } else if let expires = purchase.expiresDate, expires > date {
            status = .active
        } else if let grace, grace > date {
            status = .grace
        } else if billingRetry {
            status = .billingRetry
        } else {
            status = .expired
        }
        return SubscriptionState(
            originalTransactionID: purchase.originalTransactionID, productID: purchase.productID, status: status,
            expiresAt: purchase.expiresDate, purchasedAt: purchase.purchaseDate, originalPurchaseDate: purchase.originalPurchaseDate,
            autoRenewStatus: renewal?["auto_renew_status"]?.boolValue,
            autoRenewProductID: renewal?["auto_renew_product_id"]?.stringValue,
            isInBillingRetry: billingRetry, gracePeriodExpiresAt: grace,
            expirationIntent: status == .expired || status == .billingRetry ? renewal?["expiration_intent"]?.intValue : nil,
            isTrial: purchase.isTrialPeriod, isIntro: purchase.isInIntroOfferPeriod,
            ownershipType: latest.json["in_app_ownership_type"]?.stringValue, latestTransactionID: purchase.transactionID,
            revokedAt: purchase.cancellationDate, cancellationReason: latest.json["cancellation_reason"]?.intValue,
            observedAt: date)
    }

    /// Expiry first (the period that ends last is the current one), then purchase date, then the
    /// transaction id as a number (Apple's ids grow), so equal dates still order the same way every time.
    private static func isBefore(_ lhs: InAppPurchase, _ rhs: InAppPurchase) -> Bool {
        let left = (lhs.expiresDate ?? .distantPast, lhs.purchaseDate ?? .distantPast)
        let right = (rhs.expiresDate ?? .distantPast, rhs.purchaseDate ?? .distantPast)
        if left != right { return left < right }
        if lhs.transactionID.count != rhs.transactionID.count { return lhs.transactionID.count < rhs.transactionID.count }
        return lhs.transactionID < rhs.transactionID
    }
}
