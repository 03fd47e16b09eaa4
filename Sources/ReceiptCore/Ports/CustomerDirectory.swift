import Foundation

/// Who a support lookup is about: a user identifier, or a transaction id (either of a purchase or
/// its original), optionally within one app.
public struct CustomerQuery: Sendable, Equatable {
    public var appID: UUID?
    public var userIdentifier: String?
    public var transactionID: String?

    /// Creates a query.
    public init(appID: UUID? = nil, userIdentifier: String? = nil, transactionID: String? = nil) {
        self.appID = appID
        self.userIdentifier = userIdentifier
        self.transactionID = transactionID
    }
}

/// Everything support staff need when a customer writes in, on one page: never a receipt's
/// bytes, a secret or a token.
public struct CustomerRecord: Sendable, Equatable {
    /// A receipt (or StoreKit 2 submission) as stored.
    public struct Receipt: Sendable, Equatable {
        public var id: UUID
        public var appID: UUID
        public var userIdentifier: String?
        public var status: String
        public var environment: String?
        public var source: String?
        public var validatedBy: String?
        public var errorCode: String?
        public var fraudReason: String?
        public var createdAt: Date
        public var validatedAt: Date?

        /// Creates a row.
        public init(
            id: UUID, appID: UUID, userIdentifier: String?, status: String, environment: String?, source: String?, validatedBy: String?,
            errorCode: String?, fraudReason: String?, createdAt: Date, validatedAt: Date?
        ) {
            self.id = id
            self.appID = appID
            self.userIdentifier = userIdentifier
            self.status = status
            self.environment = environment
            self.source = source
            self.validatedBy = validatedBy
            self.errorCode = errorCode
            self.fraudReason = fraudReason
            self.createdAt = createdAt
            self.validatedAt = validatedAt
        }
    }

    /// A ledger row.
    public struct Purchase: Sendable, Equatable {
        public var appID: UUID
        public var environment: String
        public var transactionID: String
        public var originalTransactionID: String
        public var productID: String
        public var userIdentifier: String?
        public var purchaseDate: Date?
        public var expiresDate: Date?
        public var cancellationDate: Date?
        public var isConflict: Bool
        public var conflictUserIdentifier: String?
        public var quantity: Int
        /// What the customer paid, when Apple said.
        public var price: Money?
        public var offer: PurchaseOffer?
        /// `PURCHASED` or `FAMILY_SHARED`.
        public var ownershipType: String?
        /// The refund or revocation, whole or prorated.
        public var revocation: PurchaseRevocation?

        /// Creates a row.
        public init(
            appID: UUID, environment: String, transactionID: String, originalTransactionID: String, productID: String, userIdentifier: String?,
            purchaseDate: Date?, expiresDate: Date?, cancellationDate: Date?, isConflict: Bool, conflictUserIdentifier: String?,
            quantity: Int = 1, price: Money? = nil, offer: PurchaseOffer? = nil, ownershipType: String? = nil,
            revocation: PurchaseRevocation? = nil
        ) {
            self.quantity = quantity
            self.price = price
            self.offer = offer
            self.ownershipType = ownershipType
            self.revocation = revocation
            self.appID = appID
            self.environment = environment
            self.transactionID = transactionID
            self.originalTransactionID = originalTransactionID
            self.productID = productID
            self.userIdentifier = userIdentifier
            self.purchaseDate = purchaseDate
            self.expiresDate = expiresDate
            self.cancellationDate = cancellationDate
            self.isConflict = isConflict
            self.conflictUserIdentifier = conflictUserIdentifier
        }
    }

    /// A webhook delivery of one of the customer's events.
    public struct Delivery: Sendable, Equatable {
        public var eventID: UUID
        public var eventType: String
        public var endpointURL: String
        public var status: String
        public var attempts: Int
        public var lastHTTPStatus: Int?
        public var lastError: String?
        public var lastAttemptAt: Date?
        public var deliveredAt: Date?

        /// Creates a row.
        public init(
            eventID: UUID, eventType: String, endpointURL: String, status: String, attempts: Int, lastHTTPStatus: Int?, lastError: String?,
            lastAttemptAt: Date?, deliveredAt: Date?
        ) {
            self.eventID = eventID
            self.eventType = eventType
            self.endpointURL = endpointURL
            self.status = status
            self.attempts = attempts
            self.lastHTTPStatus = lastHTTPStatus
            self.lastError = lastError
            self.lastAttemptAt = lastAttemptAt
            self.deliveredAt = deliveredAt
        }
    }

    /// One call to Apple made for one of the customer's receipts.
    public struct AppleCall: Sendable, Equatable {
        public var receiptID: UUID
        public var endpoint: String
        public var httpStatus: Int?
        public var appleStatus: Int?
        public var latencyMs: Int?
        public var errorCode: String?
        public var at: Date

        /// Creates a row.
        public init(receiptID: UUID, endpoint: String, httpStatus: Int?, appleStatus: Int?, latencyMs: Int?, errorCode: String?, at: Date) {
            self.receiptID = receiptID
            self.endpoint = endpoint
            self.httpStatus = httpStatus
            self.appleStatus = appleStatus
            self.latencyMs = latencyMs
            self.errorCode = errorCode
            self.at = at
        }
    }

    /// The users the query resolved to (a transaction id names its owner, and any conflicting user).
    public var userIdentifiers: [String]
    public var receipts: [Receipt]
    public var purchases: [Purchase]
    public var subscriptions: [(appID: UUID, resource: SubscriptionResource)]
    /// Newest first.
    public var events: [ChangeEvent]
    public var deliveries: [Delivery]
    /// Newest first.
    public var calls: [AppleCall]

    /// Creates a record.
    public init(
        userIdentifiers: [String], receipts: [Receipt], purchases: [Purchase], subscriptions: [(appID: UUID, resource: SubscriptionResource)],
        events: [ChangeEvent], deliveries: [Delivery], calls: [AppleCall]
    ) {
        self.userIdentifiers = userIdentifiers
        self.receipts = receipts
        self.purchases = purchases
        self.subscriptions = subscriptions
        self.events = events
        self.deliveries = deliveries
        self.calls = calls
    }

    public static func == (lhs: CustomerRecord, rhs: CustomerRecord) -> Bool {
        lhs.userIdentifiers == rhs.userIdentifiers && lhs.receipts == rhs.receipts && lhs.purchases == rhs.purchases
            && lhs.subscriptions.map(\.resource) == rhs.subscriptions.map(\.resource) && lhs.events == rhs.events
            && lhs.deliveries == rhs.deliveries && lhs.calls == rhs.calls
    }

    /// Whether nothing at all was found.
    public var isEmpty: Bool { receipts.isEmpty && purchases.isEmpty && subscriptions.isEmpty && events.isEmpty }

    /// The apps the customer's receipts, purchases and subscriptions belong to.
    public var appIDs: Set<UUID> { Set(receipts.map(\.appID) + purchases.map(\.appID) + subscriptions.map(\.appID)) }
}

/// The support look-up behind the dashboard's customer view.
public protocol CustomerDirectory: Sendable {
    /// What is known about the customer the query names (each list bounded: the newest first).
    func customer(_ query: CustomerQuery) async throws -> CustomerRecord
}
