import Foundation

/// What changed, as a backend is told: one name per kind of change, whatever Apple API or
/// notification revealed it.
public enum EventType: String, Sendable, Equatable, CaseIterable, Codable {
    /// Apple validated a receipt (or a StoreKit 2 transaction) the backend posted.
    case receiptValidated = "receipt.validated"
    /// Apple refused it (or the app's sandbox policy did).
    case receiptInvalid = "receipt.invalid"
    /// The ingestion node found it forged or another app's: never sent to Apple.
    case receiptFraud = "receipt.fraud"
    /// A one-time purchase was refunded or revoked.
    case purchaseRefunded = "purchase.refunded"
    /// A transaction already claimed by one user was presented by another (the replay guard).
    case purchaseConflict = "purchase.conflict"
    /// A subscription receiptq had not seen before.
    case subscriptionStarted = "subscription.started"
    /// A new period began with the same product.
    case subscriptionRenewed = "subscription.renewed"
    /// The product changes: at the next renewal (a pending downgrade or crossgrade), or now (it took effect).
    case subscriptionProductChanged = "subscription.product_changed"
    /// The user turned automatic renewal on or off.
    case subscriptionAutoRenewChanged = "subscription.auto_renew_changed"
    /// A renewal failed to charge; Apple keeps trying.
    case subscriptionBillingIssue = "subscription.billing_issue"
    /// A renewal failed and Billing Grace Period keeps the user entitled for now.
    case subscriptionGracePeriodStarted = "subscription.grace_period_started"
    /// A failed renewal was charged after all.
    case subscriptionBillingRecovered = "subscription.billing_recovered"
    /// The subscription ended.
    case subscriptionExpired = "subscription.expired"
    /// Apple refunded the latest transaction.
    case subscriptionRefunded = "subscription.refunded"
    /// Family Sharing access was revoked.
    case subscriptionRevoked = "subscription.revoked"
    /// An immediate upgrade to a higher-level product.
    case subscriptionUpgraded = "subscription.upgraded"
    /// Apple extended the current period (a renewal-date extension), without a charge.
    case subscriptionExtended = "subscription.extended"
    /// A parent or guardian withdrew consent for the child's use of the app (Apple's
    /// `RESCIND_CONSENT`): the backend should stop serving that account.
    case consentRescinded = "customer.consent_rescinded"
    /// receiptq answered Apple's `CONSUMPTION_REQUEST` for a purchase (Send Consumption
    /// Information), with the app's policy's values.
    case refundConsumptionSent = "refund.consumption_sent"
    /// An operator granted the user an entitlement (until a date, or until revoked).
    case entitlementGranted = "entitlement.granted"
    /// An operator revoked a grant.
    case entitlementRevoked = "entitlement.revoked"
    /// A transaction (and its subscription) moved to another user under the app's
    /// `transfer_to_latest` rule: sent to both users, the one who lost it and the one who has it.
    case customerTransferred = "customer.transferred"
    /// Two user ids were merged into one customer (`POST /client/users/{user}/aliases`).
    case customerAliased = "customer.aliased"
    /// An operator erased the customer's data (`DELETE /admin/api/customers/{app_id}/{user_identifier}`):
    /// the backend should forget the user too.
    case customerErased = "customer.erased"

    /// Whether a filter entry selects this type: the exact name, `*`, or a family such as `subscription.*`.
    public func matches(_ pattern: String) -> Bool {
        if pattern == "*" || pattern == rawValue { return true }
        guard pattern.hasSuffix(".*") else { return false }
        return rawValue.hasPrefix(pattern.dropLast())
    }

    /// Whether `pattern` selects at least one type (a filter entry a user may register).
    public static func isValidPattern(_ pattern: String) -> Bool {
        allCases.contains { $0.matches(pattern) }
    }
}
