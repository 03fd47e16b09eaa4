import Foundation

/// A timestamp as the client API returns it: `{"utc": "2018-02-26 10:35:47 UTC", "ms": 1519641347834}`.
public struct APITimestamp: Sendable, Equatable, Codable {
    public var utc: String
    public var ms: Int64

    /// The API form of `date`.
    public init(_ date: Date) {
        ms = Int64((date.timeIntervalSince1970 * 1000).rounded())
        utc = Self.format(date)
    }

    /// The date this timestamp denotes.
    public var date: Date { Date(timeIntervalSince1970: Double(ms) / 1000) }

    private static func format(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func pad(_ value: Int?, _ width: Int) -> String {
            let text = String(value ?? 0)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(c.year, 4))-\(pad(c.month, 2))-\(pad(c.day, 2)) \(pad(c.hour, 2)):\(pad(c.minute, 2)):\(pad(c.second, 2)) UTC"
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
    }

    /// The API form of a purchase.
    public init(_ purchase: InAppPurchase, isConflict: Bool = false) {
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
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }

    /// Creates a resource.
    public init(
        id: UUID, style: ReceiptStyle?, appFamilyID: UUID, bundleID: String?, isFraud: Bool = false,
        fraudReason: String? = nil, environment: String?, submission: Submission, validationStatus: ValidationStatus,
        appleStatus: Int? = nil, inAppPurchases: [InAppPurchaseResource], createdAt: Date, updatedAt: Date
    ) {
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
        ReceiptResource(
            id: envelope.id, style: envelope.style, appFamilyID: envelope.appID, bundleID: envelope.bundleID,
            environment: envelope.environment, submission: envelope.submission, validationStatus: .pending,
            inAppPurchases: purchases.map { InAppPurchaseResource($0) }, createdAt: envelope.enqueuedAt,
            updatedAt: envelope.enqueuedAt)
    }

    /// JSON bytes (sorted keys, so equal resources are equal bytes).
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)).map { [UInt8]($0) } ?? []
    }

    /// Parses resource JSON.
    public static func decode(_ bytes: [UInt8]) throws -> ReceiptResource {
        try JSONDecoder().decode(ReceiptResource.self, from: Data(bytes))
    }
}
