import Foundation

/// What one notification changes, in receiptq's model: ledger rows and subscription states, the
/// same ones a validation writes. Whether it is applied is the store's decision (a duplicate or an
/// older notification is recorded only).
public struct NotificationEffect: Sendable, Equatable {
    /// The transactions it states (a refund carries its revocation date and reason).
    public var purchases: [InAppPurchase]
    /// The auto-renewable subscriptions it states, observed at the notification's signed date.
    public var subscriptions: [SubscriptionState]
    /// The subscription or purchase it is about (nil: none, as for `TEST`).
    public var originalTransactionID: String?
    public var transactionID: String?
    public var productID: String?

    /// Whether it changes any state (false: recorded only).
    public var changesState: Bool { !purchases.isEmpty || !subscriptions.isEmpty }

    /// Creates an effect.
    public init(
        purchases: [InAppPurchase] = [], subscriptions: [SubscriptionState] = [], originalTransactionID: String? = nil,
        transactionID: String? = nil, productID: String? = nil
    ) {
        self.purchases = purchases
        self.subscriptions = subscriptions
        self.originalTransactionID = originalTransactionID
        self.transactionID = transactionID
        self.productID = productID
    }
}

extension AppleNotification {
    /// What this notification changes.
    ///
    /// V2: the signed transaction is written to the ledger as Apple states it now (a `REFUND` or
    /// `REVOKE` carries `revocationDate`, `revocationReason`, `revocationType` and
    /// `revocationPercentage`: a `REFUND_PRORATED` keeps the purchase with its refunded share; a
    /// `REFUND_REVERSED` has none again), and for an auto-renewable subscription its state is Apple's `data.status` (or, when
    /// absent, the status the type implies) with the renewal info, exactly as a Get All
    /// Subscription Statuses answer is mapped. V1: the unified receipt is applied like a
    /// `verifyReceipt` answer. `TEST`, `CONSUMPTION_REQUEST`, `EXTERNAL_PURCHASE_TOKEN`, summaries
    /// and unknown types without a transaction change nothing.
    public var effect: NotificationEffect {
        switch version {
        case .v2: v2Effect
        case .v1: v1Effect
        }
    }

    private var v2Effect: NotificationEffect {
        guard let transaction, let purchase = InAppPurchase(serverAPITransaction: transaction) else { return NotificationEffect() }
        var effect = NotificationEffect(
            originalTransactionID: purchase.originalTransactionID, transactionID: purchase.transactionID, productID: purchase.productID)
        guard !NotificationTypes.informational.contains(type) else { return effect }
        effect.purchases = [purchase]
        if purchase.expiresDate != nil {
            let status = self.status ?? impliedStatus(purchase)
            effect.subscriptions = [
                ServerAPILedger.state(
                    status: status, purchase: purchase,
                    item: ServerAPIStatusItem(
                        status: status, originalTransactionID: purchase.originalTransactionID, transaction: transaction, renewal: renewal),
                    at: signedDate)
            ]
        }
        return effect
    }

    /// The subscription status (Apple's 1–5) a V2 type implies when `data.status` is absent
    /// (notifications signed before Apple added it).
    func impliedStatus(_ purchase: InAppPurchase) -> Int {
        switch type {
        // A prorated refund leaves the purchase standing (no revocation date): judged by its dates.
        case "REFUND" where purchase.cancellationDate != nil, "REVOKE" where purchase.cancellationDate != nil: return 5
        case "EXPIRED": return 2
        case "DID_FAIL_TO_RENEW": return subtype == "GRACE_PERIOD" ? 4 : 3
        case "GRACE_PERIOD_EXPIRED": return renewal?["isInBillingRetryPeriod"]?.boolValue == false ? 2 : 3
        default:
            if purchase.cancellationDate != nil { return 5 }
            return (purchase.expiresDate ?? .distantPast) > signedDate ? 1 : 2
        }
    }

    private var v1Effect: NotificationEffect {
        guard let unifiedReceipt, !NotificationTypes.informational.contains(type) else { return NotificationEffect() }
        let response = VerifyReceiptResponse(json: unifiedReceipt)
        let read = response.purchases
        let purchases = read.map(\.purchase)
        let subscriptions = SubscriptionState.states(from: response, purchases: read, at: signedDate)
        let latest = purchases.max { ($0.purchaseDate ?? .distantPast) < ($1.purchaseDate ?? .distantPast) }
        return NotificationEffect(
            purchases: purchases, subscriptions: subscriptions, originalTransactionID: latest?.originalTransactionID,
            transactionID: latest?.transactionID, productID: latest?.productID)
    }
}
