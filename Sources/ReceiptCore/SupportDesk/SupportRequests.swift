import Foundation

/// An operator's input to a support action that cannot go to Apple: the field it names and why
/// (the admin API answers 422 with it, the CLI prints it).
public struct SupportInputError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The field as the admin API spells it (`extend_by_days`, `request_identifier`, …).
    public var field: String
    public var reason: String
    public var description: String { "\(field) \(reason)" }

    /// Creates an input error.
    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }
}

/// Why Apple's code for a renewal extension was given (Apple's `extendReasonCode`).
public enum ExtendReason: Int, Sendable, CaseIterable {
    case undeclared = 0
    case customerSatisfaction = 1
    case other = 2
    case serviceIssueOrOutage = 3
}

/// One subscription's renewal date moved later (Extend a Subscription Renewal Date), checked
/// against Apple's rules before any call: at most 90 days, a reason code 0–3, a UUID to make
/// the request idempotent at Apple.
public struct RenewalExtension: Sendable, Equatable {
    /// Apple refuses more than 90 days in one request (and more than 365 in a year, which only it knows).
    public static let maximumDays = 90

    public var originalTransactionID: String
    public var days: Int
    public var reason: ExtendReason
    /// Apple's `requestIdentifier`: the same one sent twice extends once.
    public var requestIdentifier: UUID

    /// Checks the request.
    /// - Throws: ``SupportInputError`` naming the first field that is wrong.
    public init(originalTransactionID: String, days: Int, reason: Int, requestIdentifier: UUID) throws(SupportInputError) {
        try Self.checkTransactionID(originalTransactionID, field: "original_transaction_id")
        self.originalTransactionID = originalTransactionID
        self.days = try Self.checkDays(days)
        self.reason = try Self.checkReason(reason)
        self.requestIdentifier = requestIdentifier
    }

    static func checkDays(_ days: Int) throws(SupportInputError) -> Int {
        guard (1...maximumDays).contains(days) else {
            throw SupportInputError(field: "extend_by_days", reason: "must be an integer in 1...\(maximumDays)")
        }
        return days
    }

    static func checkReason(_ code: Int) throws(SupportInputError) -> ExtendReason {
        guard let reason = ExtendReason(rawValue: code) else {
            throw SupportInputError(
                field: "extend_reason_code", reason: "must be 0 (undeclared), 1 (customer satisfaction), 2 (other) or 3 (service issue)")
        }
        return reason
    }

    /// Apple's ids are decimal digits; anything else would be spliced into a URL path.
    public static func checkTransactionID(_ id: String, field: String) throws(SupportInputError) {
        guard !id.isEmpty, id.count <= 64, id.utf8.allSatisfy({ (48...57).contains($0) }) else {
            throw SupportInputError(field: field, reason: "must be an App Store transaction id (decimal digits)")
        }
    }
}

/// Every active subscriber of a product extended at once (Extend Subscription Renewal Dates for
/// All Active Subscribers): Apple works through them in the background; its status is polled.
public struct MassRenewalExtension: Sendable, Equatable {
    public var productID: String
    public var days: Int
    public var reason: ExtendReason
    public var requestIdentifier: UUID
    /// ISO 3166-1 alpha-3 storefronts to limit it to (empty: every storefront).
    public var storefrontCountryCodes: [String]

    /// Checks the request.
    /// - Throws: ``SupportInputError`` naming the first field that is wrong.
    public init(
        productID: String, days: Int, reason: Int, requestIdentifier: UUID, storefrontCountryCodes: [String] = []
    ) throws(SupportInputError) {
        guard !productID.isEmpty, productID.count <= 255, productID.unicodeScalars.allSatisfy({ $0.value > 32 && $0.value < 127 }) else {
            throw SupportInputError(field: "product_id", reason: "must be a product id (printable ASCII, at most 255 characters)")
        }
        guard storefrontCountryCodes.count <= 200,
            storefrontCountryCodes.allSatisfy({ $0.count == 3 && $0.unicodeScalars.allSatisfy { (65...90).contains($0.value) } })
        else {
            throw SupportInputError(field: "storefront_country_codes", reason: "must be ISO 3166-1 alpha-3 codes in capitals (USA, FRA)")
        }
        self.productID = productID
        self.days = try RenewalExtension.checkDays(days)
        self.reason = try RenewalExtension.checkReason(reason)
        self.requestIdentifier = requestIdentifier
        self.storefrontCountryCodes = storefrontCountryCodes
    }
}

/// A mass extension as receiptq keeps it: what was asked, and Apple's last word on it.
public struct MassExtensionRecord: Sendable, Equatable {
    public var appID: UUID
    public var environment: AppStoreEnvironment
    public var productID: String
    public var requestIdentifier: UUID
    public var days: Int
    public var reason: ExtendReason
    public var storefrontCountryCodes: [String]
    /// The operator who asked (`alice`, `cli:bob`).
    public var requestedBy: String
    public var requestedAt: Date
    /// Whether Apple finished it; the counts are Apple's.
    public var isComplete: Bool
    public var completedAt: Date?
    public var succeededCount: Int?
    public var failedCount: Int?
    /// When Apple was last asked about it (nil: never since the request).
    public var checkedAt: Date?

    /// Creates a record.
    public init(
        appID: UUID, environment: AppStoreEnvironment, productID: String, requestIdentifier: UUID, days: Int, reason: ExtendReason,
        storefrontCountryCodes: [String], requestedBy: String, requestedAt: Date, isComplete: Bool = false, completedAt: Date? = nil,
        succeededCount: Int? = nil, failedCount: Int? = nil, checkedAt: Date? = nil
    ) {
        self.appID = appID
        self.environment = environment
        self.productID = productID
        self.requestIdentifier = requestIdentifier
        self.days = days
        self.reason = reason
        self.storefrontCountryCodes = storefrontCountryCodes
        self.requestedBy = requestedBy
        self.requestedAt = requestedAt
        self.isComplete = isComplete
        self.completedAt = completedAt
        self.succeededCount = succeededCount
        self.failedCount = failedCount
        self.checkedAt = checkedAt
    }
}

/// Apple's answer to Get Status of Subscription Renewal Date Extensions.
public struct MassExtensionProgress: Sendable, Equatable {
    public var isComplete: Bool
    public var completedAt: Date?
    public var succeededCount: Int?
    public var failedCount: Int?

    /// Creates a progress report.
    public init(isComplete: Bool, completedAt: Date?, succeededCount: Int?, failedCount: Int?) {
        self.isComplete = isComplete
        self.completedAt = completedAt
        self.succeededCount = succeededCount
        self.failedCount = failedCount
    }
}

/// Apple's answer to one subscription's extension.
public struct RenewalExtensionResult: Sendable, Equatable {
    public var originalTransactionID: String
    /// Whether Apple extended it (false: the subscription is not eligible).
    public var succeeded: Bool
    /// The new renewal date.
    public var effectiveDate: Date?
    public var webOrderLineItemID: String?
    /// Whether receiptq queued the subscription to be read again (it stores it, and it was extended),
    /// so its stored renewal date follows without waiting for a notification or a re-poll.
    public var refreshQueued: Bool

    /// Creates a result.
    public init(originalTransactionID: String, succeeded: Bool, effectiveDate: Date?, webOrderLineItemID: String?, refreshQueued: Bool = false) {
        self.originalTransactionID = originalTransactionID
        self.succeeded = succeeded
        self.effectiveDate = effectiveDate
        self.webOrderLineItemID = webOrderLineItemID
        self.refreshQueued = refreshQueued
    }
}

/// A transaction Apple returned to a support look-up, its signature checked.
public struct SupportTransaction: Sendable, Equatable {
    public var transactionID: String
    public var originalTransactionID: String
    public var productID: String
    public var purchaseDate: Date?
    public var expiresDate: Date?
    /// When Apple refunded or revoked it.
    public var revocationDate: Date?
    /// The JWS as Apple signed it (queued as a validation job, never shown).
    public var signed: String

    /// Reads the fields of a verified `JWSTransactionDecodedPayload`; nil without ids.
    public init?(payload: JSONValue, signed: String) {
        guard let id = payload["transactionId"]?.stringValue, let product = payload["productId"]?.stringValue else { return nil }
        func date(_ name: String) -> Date? { payload[name]?.stringValue.flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) } }
        transactionID = id
        originalTransactionID = payload["originalTransactionId"]?.stringValue ?? id
        productID = product
        purchaseDate = date("purchaseDate")
        expiresDate = date("expiresDate")
        revocationDate = date("revocationDate")
        self.signed = signed
    }
}

/// A customer's e-mailed order id, looked up: their purchases, queued to be validated and stored
/// for the user the operator named.
public struct OrderLookupResult: Sendable, Equatable {
    public var transactions: [SupportTransaction]
    /// Validation jobs queued (one per transaction; the same one again is not queued twice).
    public var queued: Int

    /// Creates a result.
    public init(transactions: [SupportTransaction], queued: Int) {
        self.transactions = transactions
        self.queued = queued
    }
}

/// A customer's refunds as Apple lists them (Get Refund History, every page), and how many
/// receiptq did not know yet and queued to be applied.
public struct RefundHistoryResult: Sendable, Equatable {
    public var refunded: [SupportTransaction]
    /// Refunds whose stored purchase had no cancellation date: queued as validation jobs.
    public var applied: Int

    /// Creates a result.
    public init(refunded: [SupportTransaction], applied: Int) {
        self.refunded = refunded
        self.applied = applied
    }
}

/// What Apple says of a test notification (Get Test Notification Status).
public struct TestNotificationStatus: Sendable, Equatable {
    /// One attempt to reach the app's URL.
    public struct Attempt: Sendable, Equatable {
        public var date: Date
        /// `SUCCESS`, `NO_RESPONSE`, `UNSUCCESSFUL_HTTP_RESPONSE_CODE`, …
        public var result: String

        /// Creates an attempt.
        public init(date: Date, result: String) {
            self.date = date
            self.result = result
        }
    }

    /// The notification's UUID (from its signed payload).
    public var notificationUUID: String?
    public var attempts: [Attempt]

    /// Creates a status.
    public init(notificationUUID: String?, attempts: [Attempt]) {
        self.notificationUUID = notificationUUID
        self.attempts = attempts
    }
}
