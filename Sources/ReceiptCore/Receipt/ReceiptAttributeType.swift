/// Attribute types of the unified receipt payload (Apple's "Receipt Fields"; types not listed are
/// kept in `unknownAttributes`).
enum ReceiptAttributeType {
    static let environment = 0
    static let bundleID = 2
    static let applicationVersion = 3
    static let opaqueValue = 4
    static let sha1Hash = 5
    static let creationDate = 12
    static let inAppPurchase = 17
    static let originalPurchaseDate = 18
    static let originalApplicationVersion = 19
    static let expirationDate = 21

    static let quantity = 1701
    static let productID = 1702
    static let transactionID = 1703
    static let purchaseDate = 1704
    static let originalTransactionID = 1705
    static let inAppOriginalPurchaseDate = 1706
    static let expiresDate = 1708
    static let webOrderLineItemID = 1711
    static let cancellationDate = 1712
    static let isTrialPeriod = 1713
    static let isInIntroOfferPeriod = 1719
    static let promotionalOfferID = 1721
}
