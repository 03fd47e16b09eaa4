import Foundation

/// A timestamp as the client API returns it: `{"utc": "2018-02-26 10:35:47 UTC", "ms": 1519641347834}`.
public struct APITimestamp: Sendable, Equatable, Codable {
    public var utc: String
    public var ms: Int64

    /// The API form of `date` (clamped to years 0001...9999).
    public init(_ date: Date) {
        let interval = ReceiptDate.clampedInterval(date)
        ms = Int64((interval * 1000).rounded())
        utc = Self.format(Int(interval.rounded(.down)))
    }

    /// The date this timestamp denotes.
    public var date: Date { Date(timeIntervalSince1970: Double(ms) / 1000) }

    /// `2018-02-26 10:35:47 UTC`, by arithmetic into bytes: a `Calendar` per timestamp was the
    /// largest cost of building a resource (several timestamps per purchase, on every request).
    static func format(_ seconds: Int) -> String {
        let utc = ReceiptDate.utcFields(seconds)
        var text: [UInt8] = []
        text.reserveCapacity(23)
        func digits(_ value: Int, _ width: Int) {
            var divisor = 1
            for _ in 1..<width { divisor *= 10 }
            while divisor > 0 {
                text.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(utc.year, 4)
        text.append(UInt8(ascii: "-"))
        digits(utc.month, 2)
        text.append(UInt8(ascii: "-"))
        digits(utc.day, 2)
        text.append(UInt8(ascii: " "))
        digits(utc.hour, 2)
        text.append(UInt8(ascii: ":"))
        digits(utc.minute, 2)
        text.append(UInt8(ascii: ":"))
        digits(utc.second, 2)
        text += Array(" UTC".utf8)
        return String(decoding: text, as: UTF8.self)
    }

    func write(to writer: inout JSONWriter) {
        writer.openObject()
        writer.key("ms")
        writer.int(ms)
        writer.key("utc")
        writer.string(utc)
        writer.closeObject()
    }
}

extension JSONWriter {
    /// `"name": {"ms": …, "utc": …}`, or nothing when `value` is nil.
    mutating func member(_ name: String, _ value: APITimestamp?) {
        guard let value else { return }
        key(name)
        value.write(to: &self)
    }
}

/// One in-app purchase as the client API returns it.
public struct InAppPurchaseResource: Sendable, Equatable, Codable {
    public var productID: String
    public var transactionID: String
    public var originalTransactionID: String
    public var quantity: Int
    public var purchaseDate: APITimestamp?
    public var originalPurchaseDate: APITimestamp?
    public var expiresDate: APITimestamp?
    public var cancellationDate: APITimestamp?
    public var webOrderLineItemID: String?
    public var isTrialPeriod: Bool
    public var isInIntroOfferPeriod: Bool
    /// Set when another user already claimed this transaction (possible receipt sharing).
    public var isConflict: Bool
    /// `production` or `sandbox`: given where purchases of several receipts are listed together
    /// (the entitlement API); absent within a receipt, which has its own.
    public var environment: String?
    /// What the customer paid, in milli-units of ``currency`` (an integer: 9.99 is 9990); absent
    /// when Apple did not say (verifyReceipt).
    public var priceMilli: Int64?
    /// ISO 4217, with ``priceMilli``.
    public var currency: String?
    public var storefront: String?
    /// `introductory`, `promotional`, `offer_code` or `win_back`.
    public var offerType: String?
    public var offerIdentifier: String?
    public var offerDiscountType: String?
    /// ISO 8601 duration.
    public var offerPeriod: String?
    public var billingPlanType: String?
    /// `PURCHASED` or `FAMILY_SHARED`.
    public var ownershipType: String?
    /// `REFUND_FULL`, `REFUND_PRORATED` or `FAMILY_REVOKE`, once refunded or revoked.
    public var revocationType: String?
    /// The share refunded, in milli-percent (100000 is the whole).
    public var revocationPercentage: Int?
    public var refundedQuantity: Int?
    /// The amount refunded, in milli-units of ``currency``.
    public var refundedMilli: Int64?
    /// The units still owned (``quantity`` less refunded units; 0 once revoked).
    public var remainingQuantity: Int?

    enum CodingKeys: String, CodingKey {
        case productID = "product_id"
        case transactionID = "transaction_id"
        case originalTransactionID = "original_transaction_id"
        case quantity
        case purchaseDate = "purchase_date"
        case originalPurchaseDate = "original_purchase_date"
        case expiresDate = "expires_date"
        case cancellationDate = "cancellation_date"
        case webOrderLineItemID = "web_order_line_item_id"
        case isTrialPeriod = "is_trial_period"
        case isInIntroOfferPeriod = "is_in_intro_offer_period"
        case isConflict = "is_conflict"
        case environment
        case priceMilli = "price_milli"
        case currency, storefront
        case offerType = "offer_type"
        case offerIdentifier = "offer_identifier"
        case offerDiscountType = "offer_discount_type"
        case offerPeriod = "offer_period"
        case billingPlanType = "billing_plan_type"
        case ownershipType = "ownership_type"
        case revocationType = "revocation_type"
        case revocationPercentage = "revocation_percentage"
        case refundedQuantity = "refunded_quantity"
        case refundedMilli = "refunded_milli"
        case remainingQuantity = "remaining_quantity"
    }

    /// - Parameter flagged: write `"sandbox_flagged": true` (a sandbox purchase of a `flag` app).
    func write(to writer: inout JSONWriter, flagged: Bool = false) {
        writer.openObject()
        writer.member("billing_plan_type", billingPlanType)
        writer.member("cancellation_date", cancellationDate)
        writer.member("currency", currency)
        writer.member("environment", environment)
        writer.member("expires_date", expiresDate)
        writer.member("is_conflict", isConflict)
        writer.member("is_in_intro_offer_period", isInIntroOfferPeriod)
        writer.member("is_trial_period", isTrialPeriod)
        writer.member("offer_discount_type", offerDiscountType)
        writer.member("offer_identifier", offerIdentifier)
        writer.member("offer_period", offerPeriod)
        writer.member("offer_type", offerType)
        writer.member("original_purchase_date", originalPurchaseDate)
        writer.member("original_transaction_id", originalTransactionID)
        writer.member("ownership_type", ownershipType)
        writer.member("price_milli", priceMilli)
        writer.member("product_id", productID)
        writer.member("purchase_date", purchaseDate)
        writer.member("quantity", quantity)
        writer.member("refunded_milli", refundedMilli)
        writer.member("refunded_quantity", refundedQuantity)
        writer.member("remaining_quantity", remainingQuantity)
        writer.member("revocation_percentage", revocationPercentage)
        writer.member("revocation_type", revocationType)
        if flagged { writer.member("sandbox_flagged", true) }
        writer.member("storefront", storefront)
        writer.member("transaction_id", transactionID)
        writer.member("web_order_line_item_id", webOrderLineItemID)
        writer.closeObject()
    }

    /// The API form of a purchase.
    public init(_ purchase: InAppPurchase, isConflict: Bool = false, environment: String? = nil) {
        productID = purchase.productID
        transactionID = purchase.transactionID
        originalTransactionID = purchase.originalTransactionID
        quantity = purchase.quantity
        purchaseDate = purchase.purchaseDate.map(APITimestamp.init)
        originalPurchaseDate = purchase.originalPurchaseDate.map(APITimestamp.init)
        expiresDate = purchase.expiresDate.map(APITimestamp.init)
        cancellationDate = purchase.cancellationDate.map(APITimestamp.init)
        webOrderLineItemID = purchase.webOrderLineItemID
        isTrialPeriod = purchase.isTrialPeriod
        isInIntroOfferPeriod = purchase.isInIntroOfferPeriod
        self.isConflict = isConflict
        self.environment = environment
        priceMilli = purchase.price?.milli
        currency = purchase.price?.currency.rawValue
        storefront = purchase.storefront
        offerType = purchase.statedOffer?.type.rawValue
        offerIdentifier = purchase.statedOffer?.identifier
        offerDiscountType = purchase.statedOffer?.discountType
        offerPeriod = purchase.statedOffer?.period
        billingPlanType = purchase.billingPlanType
        ownershipType = purchase.ownershipType
        revocationType = purchase.revocation?.kind?.rawValue
        revocationPercentage = purchase.revocation?.percentageMilli
        refundedQuantity = purchase.revocation?.quantity
        refundedMilli = purchase.revocation?.amountMilli
        remainingQuantity = purchase.remainingQuantity
    }
}

/// Where a receipt stands in receiptq.
public enum ValidationStatus: String, Sendable, Codable {
    /// Accepted and queued; Apple has not answered yet.
    case pending
    /// Apple says valid.
    case valid
    /// Apple says invalid (permanently).
    case invalid
    /// Not signed by Apple, or not this app's.
    case fraud
    /// Given up: in the dead letters.
    case failed
}

/// The receipt resource of the client API (Mbaasy-compatible, plus `validation_status`).
public struct ReceiptResource: Sendable, Equatable, Codable {
    public var id: UUID
    public var style: ReceiptStyle?
    public var appFamilyID: UUID
    public var bundleID: String?
    public var isFraud: Bool
    public var fraudReason: String?
    /// `"production"` or `"sandbox"`: Apple's answer when known, else the receipt's own claim.
    public var environment: String?
    public var userIdentifier: String?
    public var metadata: JSONValue?
    public var ipAddress: String?
    public var countryCode: String?
    public var validationStatus: ValidationStatus
    /// Apple's last JSON `status`, once Apple answered.
    public var appleStatus: Int?
    public var inAppPurchases: [InAppPurchaseResource]
    /// What the client submitted: `receipt`, `signed_transaction` or `transaction_id` (nil: a receipt).
    public var source: JobSource?
    /// The transaction a StoreKit 2 submission names.
    public var transactionID: String?
    /// Which Apple API validated it, once one did.
    public var validatedBy: ValidationBackend?
    /// Why receiptq gave up on it (``ValidationStatus/failed``: in the dead letters), as stored;
    /// nil otherwise.
    public var errorCode: FailureCode?
    public var createdAt: APITimestamp
    public var updatedAt: APITimestamp

    enum CodingKeys: String, CodingKey {
        case id, style, metadata, environment
        case appFamilyID = "app_family_id"
        case bundleID = "bundle_id"
        case isFraud = "is_fraud"
        case fraudReason = "fraud_reason"
        case userIdentifier = "user_identifier"
        case ipAddress = "ip_address"
        case countryCode = "country_code"
        case validationStatus = "validation_status"
        case appleStatus = "apple_status"
        case inAppPurchases = "in_app_purchases"
        case source
        case transactionID = "transaction_id"
        case validatedBy = "validated_by"
        case errorCode = "error_code"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }

    /// Creates a resource.
    public init(
        id: UUID, style: ReceiptStyle?, appFamilyID: UUID, bundleID: String?, isFraud: Bool = false,
        fraudReason: String? = nil, environment: String?, submission: Submission, validationStatus: ValidationStatus,
        appleStatus: Int? = nil, inAppPurchases: [InAppPurchaseResource], createdAt: Date, updatedAt: Date,
        source: JobSource? = nil, transactionID: String? = nil, validatedBy: ValidationBackend? = nil, errorCode: FailureCode? = nil
    ) {
        self.errorCode = errorCode
        self.source = source
        self.transactionID = transactionID
        self.validatedBy = validatedBy
        self.id = id
        self.style = style
        self.appFamilyID = appFamilyID
        self.bundleID = bundleID
        self.isFraud = isFraud
        self.fraudReason = fraudReason
        self.environment = environment
        self.userIdentifier = submission.userIdentifier
        self.metadata = submission.metadata
        self.ipAddress = submission.ipAddress
        self.countryCode = submission.countryCode
        self.validationStatus = validationStatus
        self.appleStatus = appleStatus
        self.inAppPurchases = inAppPurchases
        self.createdAt = APITimestamp(createdAt)
        self.updatedAt = APITimestamp(updatedAt)
    }

    /// The resource as the API shows it before Apple answered, from the job and the local decode.
    public static func pending(_ envelope: JobEnvelope, purchases: [InAppPurchase]) -> ReceiptResource {
        let purchase = envelope.payload.purchase
        let source = purchase?.source ?? .receipt
        return ReceiptResource(
            id: envelope.id, style: purchase?.style, appFamilyID: envelope.appID, bundleID: purchase?.bundleID,
            environment: purchase?.environment, submission: purchase?.submission ?? Submission(), validationStatus: .pending,
            inAppPurchases: purchases.map { InAppPurchaseResource($0) }, createdAt: envelope.enqueuedAt,
            updatedAt: envelope.enqueuedAt, source: source, transactionID: source == .receipt ? nil : purchase?.transactionID)
    }

    /// JSON bytes (sorted keys, so equal resources are equal bytes; absent values omitted).
    /// - Parameter sandboxPolicy: the app's: under `flag`, a sandbox receipt says
    ///   `"sandbox_flagged": true` (absent otherwise).
    public func encoded(sandboxPolicy: SandboxPolicy = .accept) -> [UInt8] {
        var writer = JSONWriter(capacity: 512 + inAppPurchases.count * 512)
        writer.openObject()
        writer.member("app_family_id", appFamilyID.canonical)
        writer.member("apple_status", appleStatus)
        writer.member("bundle_id", bundleID)
        writer.member("country_code", countryCode)
        writer.member("created_at", createdAt)
        writer.member("environment", environment)
        writer.member("error_code", errorCode?.rawValue)
        writer.member("fraud_reason", fraudReason)
        writer.member("id", id.canonical)
        writer.key("in_app_purchases")
        writer.openArray()
        for purchase in inAppPurchases {
            purchase.write(to: &writer, flagged: sandboxPolicy.flags(environment: purchase.environment ?? environment))
        }
        writer.closeArray()
        writer.member("ip_address", ipAddress)
        writer.member("is_fraud", isFraud)
        writer.member("metadata", metadata)
        if sandboxPolicy.flags(environment: environment) { writer.member("sandbox_flagged", true) }
        writer.member("source", source?.rawValue)
        writer.member("style", style?.rawValue)
        writer.member("transaction_id", transactionID)
        writer.member("updated_at", updatedAt)
        writer.member("user_identifier", userIdentifier)
        writer.member("validated_by", validatedBy?.rawValue)
        writer.member("validation_status", validationStatus.rawValue)
        writer.closeObject()
        return writer.bytes
    }

    /// Parses resource JSON.
    public static func decode(_ bytes: [UInt8]) throws -> ReceiptResource {
        try JSONDecoder().decode(ReceiptResource.self, from: Data(bytes))
    }
}
