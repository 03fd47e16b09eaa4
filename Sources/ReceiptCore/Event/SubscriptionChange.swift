import Foundation

/// One change of a subscription, as an event states it: which kind, when Apple says it happened,
/// and the fields that changed (`from` → `to`, as the API prints them).
public struct SubscriptionChange: Sendable, Equatable {
    public var type: EventType
    public var occurredAt: Date

    /// Creates a change.
    public init(type: EventType, occurredAt: Date) {
        self.type = type
        self.occurredAt = occurredAt
    }

    /// The events a stored state turning into `after` means, in the order a backend should apply
    /// them; none when nothing a backend acts on changed (a re-poll that found the same state, a
    /// replayed job). `before` is nil when the subscription is new to receiptq.
    ///
    /// Pure: the store calls it inside the transaction that writes `after`, with `before` read
    /// under the subscription's lock, so each change is stated exactly once.
    public static func between(_ before: SubscriptionState?, _ after: SubscriptionState) -> [SubscriptionChange] {
        let observed = after.observedAt
        guard let before else {
            var changes = [SubscriptionChange(type: .subscriptionStarted, occurredAt: after.originalPurchaseDate ?? after.purchasedAt ?? observed)]
            // First seen already in trouble or ended: say so too, so the backend's state matches.
            changes += statusEvents(entering: after)
            return changes
        }
        var changes: [SubscriptionChange] = []
        let newTransaction = after.latestTransactionID != before.latestTransactionID
        let later = (after.expiresAt ?? .distantPast) > (before.expiresAt ?? .distantPast)
        let wasInTrouble = before.status == .billingRetry || before.status == .grace || before.isInBillingRetry
        if before.status == .revoked, after.status != .revoked {
            // A refund reversed: the subscription is back as it was.
            changes.append(SubscriptionChange(type: .subscriptionStarted, occurredAt: observed))
        }
        if newTransaction, later {
            if wasInTrouble { changes.append(SubscriptionChange(type: .subscriptionBillingRecovered, occurredAt: after.purchasedAt ?? observed)) }
            let type: EventType
            if after.productID == before.productID {
                type = .subscriptionRenewed
            } else if let purchased = after.purchasedAt, let ended = before.expiresAt, purchased < ended {
                // The new product began before the old period ended: an upgrade, which takes effect at once.
                type = .subscriptionUpgraded
            } else {
                type = .subscriptionProductChanged
            }
            changes.append(SubscriptionChange(type: type, occurredAt: after.purchasedAt ?? observed))
        } else if later, !newTransaction, after.status != .revoked {
            changes.append(SubscriptionChange(type: .subscriptionExtended, occurredAt: observed))
        } else if wasInTrouble, after.status == .active, !after.isInBillingRetry {
            changes.append(SubscriptionChange(type: .subscriptionBillingRecovered, occurredAt: observed))
        }
        // Unknown before (a transaction stored as the device signed it carries no renewal info): a
        // subscription renews unless turned off, so turning it off is news; without this, a
        // customer who turned auto-renew off before any renewal or poll was never told of.
        if let on = after.autoRenewStatus, on != (before.autoRenewStatus ?? true) {
            changes.append(SubscriptionChange(type: .subscriptionAutoRenewChanged, occurredAt: observed))
        }
        if let next = after.autoRenewProductID, let was = before.autoRenewProductID, next != was, next != after.productID || !newTransaction,
            !changes.contains(where: { $0.type == .subscriptionProductChanged })
        {
            changes.append(SubscriptionChange(type: .subscriptionProductChanged, occurredAt: observed))
        }
        if after.status != before.status || after.isInBillingRetry != before.isInBillingRetry {
            changes += statusEvents(entering: after, from: before)
        }
        if after.status != .revoked, let revoked = after.revokedAt, before.revokedAt == nil {
            // One period refunded while the subscription itself carries on (Apple still says active).
            let type: EventType = after.ownershipType == "FAMILY_SHARED" ? .subscriptionRevoked : .subscriptionRefunded
            changes.append(SubscriptionChange(type: type, occurredAt: revoked))
        }
        return changes
    }

    /// The events for arriving in `after`'s status (from `before`'s, when known); none for `active`.
    private static func statusEvents(entering after: SubscriptionState, from before: SubscriptionState? = nil) -> [SubscriptionChange] {
        let observed = after.observedAt
        let wasInTrouble = before.map { $0.status == .billingRetry || $0.status == .grace || $0.isInBillingRetry } ?? false
        switch after.status {
        case .grace where before?.status != .grace:
            // A failed renewal under Billing Grace Period is a billing issue too: a backend that only
            // listens for billing issues still hears of it.
            return (wasInTrouble ? [] : [SubscriptionChange(type: .subscriptionBillingIssue, occurredAt: observed)])
                + [SubscriptionChange(type: .subscriptionGracePeriodStarted, occurredAt: observed)]
        case .billingRetry where !wasInTrouble:
            return [SubscriptionChange(type: .subscriptionBillingIssue, occurredAt: observed)]
        case .active where after.isInBillingRetry && !wasInTrouble:
            return [SubscriptionChange(type: .subscriptionBillingIssue, occurredAt: observed)]
        case .expired where before?.status != .expired:
            return [SubscriptionChange(type: .subscriptionExpired, occurredAt: after.expiresAt ?? observed)]
        case .revoked where before?.status != .revoked:
            // Family Sharing access ends by revocation; a purchase of one's own, by a refund.
            let type: EventType = after.ownershipType == "FAMILY_SHARED" ? .subscriptionRevoked : .subscriptionRefunded
            return [SubscriptionChange(type: type, occurredAt: after.revokedAt ?? observed)]
        case .upgraded where before?.status != .upgraded:
            return [SubscriptionChange(type: .subscriptionUpgraded, occurredAt: observed)]
        default:
            return []
        }
    }

    /// The fields a backend keys on that differ between the two states, as `name → (from, to)` in
    /// the API's spelling (timestamps as milliseconds); every field's `to` when `before` is nil.
    public static func fields(_ before: SubscriptionState?, _ after: SubscriptionState) -> [(name: String, from: JSONValue, to: JSONValue)] {
        func time(_ date: Date?) -> JSONValue { date.map { .number(($0.timeIntervalSince1970 * 1000).rounded()) } ?? .null }
        func text(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }
        func flag(_ value: Bool?) -> JSONValue { value.map(JSONValue.bool) ?? .null }
        func number(_ value: Int?) -> JSONValue { value.map { .number(Double($0)) } ?? .null }
        let pairs: [(String, (SubscriptionState) -> JSONValue)] = [
            ("auto_renew_product_id", { text($0.autoRenewProductID) }), ("auto_renew_status", { flag($0.autoRenewStatus) }),
            ("cancellation_date", { time($0.revokedAt) }), ("expiration_intent", { number($0.expirationIntent) }),
            ("expires_date", { time($0.expiresAt) }), ("grace_period_expires_date", { time($0.gracePeriodExpiresAt) }),
            ("is_in_billing_retry_period", { flag($0.isInBillingRetry) }), ("latest_transaction_id", { text($0.latestTransactionID) }),
            ("product_id", { text($0.productID) }), ("status", { text($0.status.rawValue) }),
        ]
        return pairs.compactMap { name, value in
            let to = value(after)
            let from = before.map(value) ?? .null
            return from == to ? nil : (name, from, to)
        }
    }
}
