import Foundation

/// A subscription as the entitlement API shows it: Apple's last word (`status`, as of
/// `observed_at`) and whether the user is entitled right now (`is_entitled`, from the dates).
public struct SubscriptionResource: Sendable, Equatable {
    public var state: SubscriptionState
    /// `production` or `sandbox`.
    public var environment: String
    public var userIdentifier: String?
    /// The stored receipt re-polls send (its latest receipt).
    public var receiptID: UUID
    public var nextPollAt: Date?
    public var lastPolledAt: Date?
    /// The bounded error of the last re-poll, if it failed.
    public var lastPollError: String?
    public var createdAt: Date
    public var updatedAt: Date

    /// Creates a resource.
    public init(
        state: SubscriptionState, environment: String, userIdentifier: String?, receiptID: UUID, nextPollAt: Date?,
        lastPolledAt: Date?, lastPollError: String?, createdAt: Date, updatedAt: Date
    ) {
        self.state = state
        self.environment = environment
        self.userIdentifier = userIdentifier
        self.receiptID = receiptID
        self.nextPollAt = nextPollAt
        self.lastPolledAt = lastPolledAt
        self.lastPollError = lastPollError
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    /// JSON bytes, with `is_entitled` as of `now` (sorted keys; absent values omitted).
    /// - Parameter sandboxPolicy: the app's: under `flag`, a sandbox subscription says
    ///   `"sandbox_flagged": true` (absent otherwise).
    public func encoded(at now: Date, sandboxPolicy: SandboxPolicy = .accept) -> [UInt8] {
        var writer = JSONWriter(capacity: 1024)
        write(to: &writer, at: now, sandboxPolicy: sandboxPolicy)
        return writer.bytes
    }

    func write(to writer: inout JSONWriter, at now: Date, sandboxPolicy: SandboxPolicy) {
        func time(_ date: Date?) -> APITimestamp? { date.map(APITimestamp.init) }
        writer.openObject()
        writer.member("auto_renew_product_id", state.autoRenewProductID)
        writer.member("auto_renew_status", state.autoRenewStatus)
        writer.member("cancellation_date", time(state.revokedAt))
        writer.member("cancellation_reason", state.cancellationReason)
        writer.member("created_at", time(createdAt))
        writer.member("currency", state.price?.currency.rawValue)
        writer.member("environment", environment)
        writer.member("expiration_intent", state.expirationIntent)
        writer.member("expires_date", time(state.expiresAt))
        writer.member("grace_period_expires_date", time(state.gracePeriodExpiresAt))
        writer.member("is_entitled", state.isEntitled(at: now))
        writer.member("is_in_billing_retry_period", state.isInBillingRetry)
        writer.member("is_in_intro_offer_period", state.isIntro)
        writer.member("is_trial_period", state.isTrial)
        writer.member("last_poll_error", lastPollError)
        writer.member("last_polled_at", time(lastPolledAt))
        writer.member("latest_transaction_id", state.latestTransactionID)
        writer.member("next_poll_at", time(nextPollAt))
        writer.member("observed_at", time(state.observedAt))
        writer.member("original_purchase_date", time(state.originalPurchaseDate))
        writer.member("original_transaction_id", state.originalTransactionID)
        writer.member("ownership_type", state.ownershipType)
        writer.member("price_milli", state.price?.milli)
        writer.member("product_id", state.productID)
        writer.member("purchase_date", time(state.purchasedAt))
        writer.member("receipt_id", receiptID.canonical)
        if sandboxPolicy.flags(environment: environment) { writer.member("sandbox_flagged", true) }
        writer.member("status", state.status.rawValue)
        writer.member("updated_at", time(updatedAt))
        writer.member("user_identifier", userIdentifier)
        writer.closeObject()
    }
}

/// Everything one user of an app has bought: auto-renewable subscriptions with their state, and
/// the other purchases of the ledger (non-consumables, non-renewing subscriptions, consumables not
/// yet finished: a receipt does not say which is which).
public struct UserEntitlements: Sendable, Equatable {
    public var userIdentifier: String
    public var subscriptions: [SubscriptionResource]
    public var purchases: [InAppPurchaseResource]

    /// Creates the listing.
    public init(userIdentifier: String, subscriptions: [SubscriptionResource], purchases: [InAppPurchaseResource]) {
        self.userIdentifier = userIdentifier
        self.subscriptions = subscriptions
        self.purchases = purchases
    }

    /// JSON bytes, with each subscription's `is_entitled` as of `now`.
    /// - Parameter sandboxPolicy: the app's, named in the answer (`sandbox_policy`); under `flag`
    ///   each sandbox subscription and purchase says `"sandbox_flagged": true`.
    public func encoded(at now: Date, sandboxPolicy: SandboxPolicy = .accept) -> [UInt8] {
        var writer = JSONWriter(capacity: 512 + subscriptions.count * 1024 + purchases.count * 512)
        writer.openObject()
        writer.key("purchases")
        writer.openArray()
        for purchase in purchases { purchase.write(to: &writer, flagged: sandboxPolicy.flags(environment: purchase.environment)) }
        writer.closeArray()
        writer.member("sandbox_policy", sandboxPolicy.rawValue)
        writer.key("subscriptions")
        writer.openArray()
        for subscription in subscriptions { subscription.write(to: &writer, at: now, sandboxPolicy: sandboxPolicy) }
        writer.closeArray()
        writer.member("user_identifier", userIdentifier)
        writer.closeObject()
        return writer.bytes
    }
}

/// The Postgres read side of the entitlement API.
public protocol SubscriptionCatalog: Sendable {
    /// The subscriptions and other purchases `userIdentifier` holds in `appID`.
    func entitlements(appID: UUID, userIdentifier: String) async throws -> UserEntitlements
    /// One subscription of `appID`; when it exists in both environments and none is named, the production one.
    func subscription(appID: UUID, originalTransactionID: String, environment: String?) async throws -> SubscriptionResource?
}
