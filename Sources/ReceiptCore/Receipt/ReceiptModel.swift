import Foundation

/// Which of Apple's two receipt formats a receipt uses.
public enum ReceiptStyle: String, Sendable, Codable {
    /// iOS 7+ app receipt: a PKCS#7 SignedData whose content is a SET of attributes.
    case unified
    /// iOS 6 `SKPaymentTransaction.transactionReceipt`: an old-style plist with `purchase-info` and `signature`.
    case transaction
}

/// Attribute 0 of a unified receipt, or the transaction receipt's `environment`.
///
/// Kept verbatim, because Apple has added values over the years (`ProductionVPP`, `LocalTesting`, …) and
/// an unknown value must survive a round trip rather than be collapsed into a guess.
public struct ReceiptEnvironment: RawRepresentable, Hashable, Sendable, Codable {
    /// The value as Apple wrote it, e.g. `Production`, `ProductionSandbox`, `Xcode`.
    public var rawValue: String

    /// Creates an environment from Apple's spelling.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// An App Store production receipt.
    public static let production = ReceiptEnvironment(rawValue: "Production")
    /// Attribute 0 of a unified sandbox receipt.
    public static let productionSandbox = ReceiptEnvironment(rawValue: "ProductionSandbox")
    /// The `environment` of an iOS 6 sandbox transaction receipt.
    public static let sandbox = ReceiptEnvironment(rawValue: "Sandbox")
    /// A receipt made by Xcode's StoreKit testing (self-signed).
    public static let xcode = ReceiptEnvironment(rawValue: "Xcode")

    /// Whether the receipt came from anywhere but the production App Store.
    ///
    /// Anything that mentions sandbox, Xcode or local testing counts: those receipts must never unlock
    /// production entitlements, so an unfamiliar test-ish value errs on the sandbox side.
    public var isSandbox: Bool { apiName != "production" }

    /// The lowercase name used in our API: `production`, `sandbox` or `xcode`.
    public var apiName: String {
        let lower = rawValue.lowercased()
        if lower == "xcode" || lower.contains("localtesting") || lower.contains("xcode") { return "xcode" }
        if lower.contains("sandbox") { return "sandbox" }
        return "production"
    }
}

/// An attribute of the receipt payload that this module does not model, kept rather than dropped.
public struct ReceiptAttribute: Sendable, Equatable, Hashable, Codable {
    /// The attribute's `type` INTEGER.
    public var type: Int
    /// The attribute's `version` INTEGER.
    public var version: Int
    /// The OCTET STRING's contents (usually itself DER: a string, an INTEGER, a nested SET).
    public var value: [UInt8]

    /// Creates an attribute.
    public init(type: Int, version: Int, value: [UInt8]) {
        self.type = type
        self.version = version
        self.value = value
    }
}

/// One in-app purchase of a receipt (attribute 17 of a unified receipt, or the single purchase of a
/// transaction receipt).
public struct InAppPurchase: Sendable, Equatable, Codable {
    /// 1701. Defaults to 1 when absent.
    public var quantity: Int
    /// 1702.
    public var productID: String
    /// 1703.
    public var transactionID: String
    /// 1705. Empty when the receipt has none (Xcode StoreKit-testing receipts omit it).
    public var originalTransactionID: String
    /// 1704.
    public var purchaseDate: Date?
    /// 1706.
    public var originalPurchaseDate: Date?
    /// 1708: subscription expiry; nil for other products.
    public var expiresDate: Date?
    /// 1712: refund or family-sharing revocation; a purchase with one must be treated as never made.
    public var cancellationDate: Date?
    /// 1711: an INTEGER in the payload, kept as a decimal string like Apple's JSON.
    public var webOrderLineItemID: String?
    /// 1713.
    public var isTrialPeriod: Bool
    /// 1719.
    public var isInIntroOfferPeriod: Bool
    /// Why it was refunded or revoked: 1 an issue with the app, 0 another reason (verifyReceipt's
    /// `cancellation_reason`, the Server API's `revocationReason`); nil when not revoked or unsaid.
    public var cancellationReason: Int?
    /// 1721.
    public var promotionalOfferID: String?
    /// Transaction receipts only (`subscription-group-identifier`); app receipts carry no documented attribute for it.
    public var subscriptionGroupIdentifier: String?
    /// In-app attributes this module does not model, in payload order.
    public var unknownAttributes: [ReceiptAttribute]
    /// The UUID the app set at purchase to name its user (the Server API's `appAccountToken`,
    /// verifyReceipt's `app_account_token`); receipts themselves carry none.
    public var appAccountToken: UUID?
    /// What the customer paid (Apple's signed `price` and `currency`); nil when Apple did not say
    /// (`verifyReceipt` answers and receipts carry no price).
    public var price: Money?
    /// Apple's `storefront`: the App Store country (ISO 3166-1 alpha-3, `USA`).
    public var storefront: String?
    /// The offer it was bought under, when any.
    public var offer: PurchaseOffer?
    /// Apple's `billingPlanType` as signed (`MONTHLY` with a 12-month commitment, 2026-04).
    public var billingPlanType: String?
    /// `PURCHASED` or `FAMILY_SHARED` (a family member's access to another's purchase), when Apple says.
    public var ownershipType: String?
    /// The refund or revocation Apple reported, when any: a full one also sets ``cancellationDate``;
    /// a prorated one leaves the purchase standing with fewer units.
    public var revocation: PurchaseRevocation?

    /// Creates a purchase; optional fields default to absent.
    public init(
        quantity: Int = 1,
        productID: String,
        transactionID: String,
        originalTransactionID: String,
        purchaseDate: Date? = nil,
        originalPurchaseDate: Date? = nil,
        expiresDate: Date? = nil,
        cancellationDate: Date? = nil,
        webOrderLineItemID: String? = nil,
        isTrialPeriod: Bool = false,
        isInIntroOfferPeriod: Bool = false,
        promotionalOfferID: String? = nil,
        subscriptionGroupIdentifier: String? = nil,
        unknownAttributes: [ReceiptAttribute] = []
    ) {
        self.quantity = quantity
        self.productID = productID
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expiresDate = expiresDate
        self.cancellationDate = cancellationDate
        self.webOrderLineItemID = webOrderLineItemID
        self.isTrialPeriod = isTrialPeriod
        self.isInIntroOfferPeriod = isInIntroOfferPeriod
        self.promotionalOfferID = promotionalOfferID
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.unknownAttributes = unknownAttributes
    }
}

/// A decoded receipt of either style. Decoding does not verify the signature: that happens
/// elsewhere (OpenSSL) on the same bytes, so nothing here is trustworthy until it has.
public struct AppReceipt: Sendable, Equatable, Codable {
    /// Unified (iOS 7+) or transaction (iOS 6).
    public var style: ReceiptStyle
    /// Attribute 2, or `bid`.
    public var bundleID: String
    /// Attribute 0, or `environment` (absent in production transaction receipts, hence `.production`).
    public var environment: ReceiptEnvironment
    /// Attribute 3, or `bvrs`.
    public var applicationVersion: String?
    /// Attribute 19: the version first bought, for apps that moved from paid to subscriptions.
    public var originalApplicationVersion: String?
    /// Attribute 4: input to the device hash.
    public var opaqueValue: [UInt8]?
    /// Attribute 5: SHA-1(device id ‖ opaque ‖ bundle id DER).
    public var sha1Hash: [UInt8]?
    /// Attribute 2's value exactly as signed, when it is not the plain DER UTF8String of
    /// ``bundleID`` (Apple always writes that): the device hash covers these bytes, so an unusual
    /// encoding must be hashed as it came. Nil in every receipt Apple makes.
    public var bundleIDValue: [UInt8]?
    /// Attribute 12. Nil for transaction receipts: verify those at the purchase date instead.
    public var creationDate: Date?
    /// Attribute 18.
    public var originalPurchaseDate: Date?
    /// Attribute 21 (volume-purchase receipts).
    public var expirationDate: Date?
    /// Attribute 17 in payload order, or the single purchase of a transaction receipt.
    public var inApp: [InAppPurchase]
    /// Receipt attributes this module does not model, in payload order.
    public var unknownAttributes: [ReceiptAttribute]
    /// Transaction style only: the decoded `purchase-info` plist, hyphenated keys verbatim.
    public var transactionInfo: [String: String]?
    /// Transaction style only: the decoded `signature` blob (see ``TransactionReceiptCodec/parseSignatureBlob(_:)``).
    public var transactionSignature: [UInt8]?
    /// Transaction style only: the base64-decoded `purchase-info` bytes exactly as signed.
    public var transactionPurchaseInfo: [UInt8]?

    /// Creates a receipt; optional fields default to absent.
    public init(
        style: ReceiptStyle = .unified,
        bundleID: String,
        environment: ReceiptEnvironment,
        applicationVersion: String? = nil,
        originalApplicationVersion: String? = nil,
        opaqueValue: [UInt8]? = nil,
        sha1Hash: [UInt8]? = nil,
        creationDate: Date? = nil,
        originalPurchaseDate: Date? = nil,
        expirationDate: Date? = nil,
        inApp: [InAppPurchase] = [],
        unknownAttributes: [ReceiptAttribute] = [],
        transactionInfo: [String: String]? = nil,
        transactionSignature: [UInt8]? = nil,
        transactionPurchaseInfo: [UInt8]? = nil
    ) {
        self.style = style
        self.bundleID = bundleID
        self.environment = environment
        self.applicationVersion = applicationVersion
        self.originalApplicationVersion = originalApplicationVersion
        self.opaqueValue = opaqueValue
        self.sha1Hash = sha1Hash
        self.creationDate = creationDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expirationDate = expirationDate
        self.inApp = inApp
        self.unknownAttributes = unknownAttributes
        self.transactionInfo = transactionInfo
        self.transactionSignature = transactionSignature
        self.transactionPurchaseInfo = transactionPurchaseInfo
    }
}
