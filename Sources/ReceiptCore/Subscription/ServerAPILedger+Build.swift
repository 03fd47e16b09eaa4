import Foundation

/// One subscription's entry in Get All Subscription Statuses (`data[].lastTransactions[]`), with
/// its two JWS already signature-checked and decoded.
public struct ServerAPIStatusItem: Sendable, Equatable {
    /// Apple's status: 1 active, 2 expired, 3 billing retry, 4 billing grace period, 5 revoked.
    public var status: Int
    public var originalTransactionID: String
    /// The decoded `signedTransactionInfo` payload.
    public var transaction: JSONValue
    /// The decoded `signedRenewalInfo` payload, when Apple sent one.
    public var renewal: JSONValue?

    /// Creates an item.
    public init(status: Int, originalTransactionID: String, transaction: JSONValue, renewal: JSONValue?) {
        self.status = status
        self.originalTransactionID = originalTransactionID
        self.transaction = transaction
        self.renewal = renewal
    }
}

extension ServerAPILedger {
    /// Reduces decoded Server API payloads to receiptq's model, observed at `date`.
    ///
    /// Purchases come from every transaction (history pages and the statuses' latest
    /// transactions), de-duplicated by transaction id. Each subscription's state is Apple's status
    /// (1–5) mapped onto ``SubscriptionStatus``, with the renewal info's auto-renew, grace period,
    /// billing retry and expiration intent; a subscription seen in the history but absent from the
    /// statuses is judged by its dates, as a `verifyReceipt` answer would be.
    /// - Parameters:
    ///   - environment: `production` or `sandbox`.
    ///   - transactions: decoded `JWSTransactionDecodedPayload`s.
    ///   - statuses: decoded status items.
    ///   - date: when Apple answered.
    public static func build(
        environment: String, transactions: [JSONValue], statuses: [ServerAPIStatusItem], at date: Date
    ) -> ServerAPILedger {
        var seen = Set<String>()
        var purchases: [InAppPurchase] = []
        for json in transactions + statuses.map(\.transaction) {
            guard let purchase = InAppPurchase(serverAPITransaction: json), seen.insert(purchase.transactionID).inserted else { continue }
            purchases.append(purchase)
        }
        var states: [String: SubscriptionState] = [:]
        for item in statuses {
            guard let purchase = InAppPurchase(serverAPITransaction: item.transaction), purchase.expiresDate != nil else { continue }
            states[purchase.originalTransactionID] = state(status: item.status, purchase: purchase, item: item, at: date)
        }
        // History without a status (Apple lists every group it knows; this covers a partial answer).
        let byOriginal = Dictionary(grouping: purchases.filter { $0.expiresDate != nil }, by: \.originalTransactionID)
        for (original, group) in byOriginal where states[original] == nil {
            guard let latest = group.max(by: { ($0.expiresDate ?? .distantPast) < ($1.expiresDate ?? .distantPast) }) else { continue }
            let status: Int = latest.cancellationDate != nil ? 5 : (latest.expiresDate ?? .distantPast) > date ? 1 : 2
            let json = transactions.first { $0["transactionId"]?.stringValue == latest.transactionID } ?? .object([:])
            states[original] = state(
                status: status, purchase: latest,
                item: ServerAPIStatusItem(status: status, originalTransactionID: original, transaction: json, renewal: nil), at: date)
        }
        return ServerAPILedger(
            environment: environment, purchases: purchases, subscriptions: states.keys.sorted().compactMap { states[$0] })
    }

    static func state(status: Int, purchase: InAppPurchase, item: ServerAPIStatusItem, at date: Date) -> SubscriptionState {
        let renewal = item.renewal
        let isUpgraded = item.transaction["isUpgraded"]?.boolValue ?? false
        let mapped: SubscriptionStatus =
            if isUpgraded {
                .upgraded
            } else {
                switch status {
                case 1: .active
                case 3: .billingRetry
                case 4: .grace
                case 5: .revoked
                default: .expired
                }
            }
        return SubscriptionState(
            originalTransactionID: purchase.originalTransactionID, productID: purchase.productID, status: mapped,
            expiresAt: purchase.expiresDate, purchasedAt: purchase.purchaseDate, originalPurchaseDate: purchase.originalPurchaseDate,
            autoRenewStatus: renewal?["autoRenewStatus"]?.intValue.map { $0 == 1 },
            autoRenewProductID: renewal?["autoRenewProductId"]?.stringValue,
            isInBillingRetry: renewal?["isInBillingRetryPeriod"]?.boolValue ?? (status == 3 || status == 4),
            gracePeriodExpiresAt: renewal.flatMap { milliseconds($0["gracePeriodExpiresDate"]) },
            expirationIntent: mapped == .expired || mapped == .billingRetry ? renewal?["expirationIntent"]?.intValue : nil,
            isTrial: purchase.isTrialPeriod, isIntro: purchase.isInIntroOfferPeriod,
            ownershipType: item.transaction["inAppOwnershipType"]?.stringValue, latestTransactionID: purchase.transactionID,
            revokedAt: purchase.cancellationDate, cancellationReason: item.transaction["revocationReason"]?.intValue, observedAt: date,
            price: purchase.price)
    }
}

extension InAppPurchase {
    /// Reads a decoded `JWSTransactionDecodedPayload` (dates in milliseconds since 1970).
    /// - Returns: nil without `transactionId` or `productId`.
    public init?(serverAPITransaction json: JSONValue) {
        guard let transactionID = json["transactionId"]?.stringValue, let productID = json["productId"]?.stringValue else { return nil }
        let offerType = json["offerType"]?.intValue
        let discount = json["offerDiscountType"]?.stringValue
        self.init(
            quantity: json["quantity"]?.intValue ?? 1, productID: productID, transactionID: transactionID,
            originalTransactionID: json["originalTransactionId"]?.stringValue ?? transactionID,
            purchaseDate: ServerAPILedger.milliseconds(json["purchaseDate"]),
            originalPurchaseDate: ServerAPILedger.milliseconds(json["originalPurchaseDate"]),
            expiresDate: ServerAPILedger.milliseconds(json["expiresDate"]),
            cancellationDate: ServerAPILedger.milliseconds(json["revocationDate"]),
            webOrderLineItemID: json["webOrderLineItemId"]?.stringValue,
            // An introductory offer (type 1) is a free trial unless Apple names another discount.
            isTrialPeriod: offerType == 1 && (discount == nil || discount == "FREE_TRIAL"),
            isInIntroOfferPeriod: offerType == 1)
        if offerType == 2 { promotionalOfferID = json["offerIdentifier"]?.stringValue }
        subscriptionGroupIdentifier = json["subscriptionGroupIdentifier"]?.stringValue
        appAccountToken = json["appAccountToken"]?.stringValue.flatMap(UUID.init(uuidString:))
        price = Money(milli: JWSFields.int(json["price"]), currency: json["currency"]?.stringValue)
        storefront = json["storefront"]?.stringValue
        offer = offerType.flatMap(OfferType.init(appleCode:)).map {
            PurchaseOffer(
                type: $0, identifier: json["offerIdentifier"]?.stringValue, discountType: discount,
                period: json["offerPeriod"]?.stringValue)
        }
        billingPlanType = json["billingPlanType"]?.stringValue
        ownershipType = json["inAppOwnershipType"]?.stringValue
        if cancellationDate != nil {
            let revocation = PurchaseRevocation(
                kind: json["revocationType"]?.stringValue.flatMap(RevocationKind.init(rawValue:)),
                percentageMilli: json["revocationPercentage"]?.intValue, quantity: quantity, price: price)
            self.revocation = revocation
            // A prorated refund leaves the purchase standing: only its refunded share is recorded.
            if !revocation.revokesPurchase { cancellationDate = nil }
        }
        cancellationReason = cancellationDate == nil ? nil : json["revocationReason"]?.intValue
    }
}

extension ServerAPILedger {
    /// Apple's JWS dates: milliseconds since 1970, as a JSON number (or, tolerantly, a string).
    static func milliseconds(_ value: JSONValue?) -> Date? {
        let ms: Double? =
            switch value {
            case .number(let number)?: number
            case .string(let text)?: Double(text)
            default: nil
            }
        guard let ms, ms.isFinite else { return nil }
        return Date(timeIntervalSince1970: ms / 1000)
    }
}
