import Foundation

/// What a job does: one case per kind of work, each carrying only its own fields.
///
/// The worker switches over it, so a new case without a handler is a compile error, not a run-time
/// tag check. The queue moves the envelope's bytes; only ``JobEnvelope/decode(_:)`` reads them.
public enum JobPayload: Sendable, Equatable {
    /// An app receipt a client posted (Mbaasy or Cloud Softphone door).
    case receipt(ReceiptJob)
    /// A StoreKit 2 transaction: a signed transaction from the device, or a bare transaction id.
    case transaction(TransactionJob)
    /// A re-poll of a subscription before it expires.
    case repoll(RepollJob)
    /// An App Store Server Notification (V2 signed, or V1), checked at the door: applied to the
    /// ledger and subscriptions without a call to Apple.
    case notification(NotificationJob)
    /// A webhook delivery of one event to one endpoint of the customer's backend.
    case delivery(WebhookDelivery)
    /// A receipt or transaction brought by a bulk import (`POST …/batch`, `receiptq import`).
    case importItem(ImportItem)
    /// The answer to Apple's `CONSUMPTION_REQUEST` (Send Consumption Information), due before its deadline.
    case consumption(ConsumptionJob)

    /// The queue family and metric label of this payload.
    public var kind: JobKind {
        switch self {
        case .receipt, .transaction, .importItem: .validate
        case .repoll: .repoll
        // An answer to a notification: it waits with the notifications (one queue, one engine).
        case .notification, .consumption: .notification
        case .delivery: .webhook
        }
    }

    /// The purchase this job validates with Apple: a receipt or a transaction, directly or as an
    /// import's item; nil for the kinds that validate none.
    public var purchase: PurchaseJob? {
        switch self {
        case .receipt(let job): .receipt(job)
        case .transaction(let job): .transaction(job)
        case .importItem(let item): item.purchase
        case .repoll, .notification, .delivery, .consumption: nil
        }
    }
}

/// What kind of work a job is: the queue it waits in and the label its metrics carry (derived from
/// ``JobPayload``, never stored beside it).
public enum JobKind: String, Sendable, Codable, CaseIterable {
    /// First validation of a receipt or transaction a client posted (or an import brought).
    case validate
    /// A re-poll of a subscription before it expires.
    case repoll
    /// An App Store Server Notification.
    case notification
    /// A webhook delivery of one event to one endpoint of the customer's backend.
    case webhook
}

/// A receipt or a transaction to validate with Apple: what the validation jobs and import items have
/// in common.
public enum PurchaseJob: Sendable, Equatable {
    case receipt(ReceiptJob)
    case transaction(TransactionJob)

    /// The bundle id the door read from the receipt or transaction.
    public var bundleID: String? {
        switch self {
        case .receipt(let job): job.bundleID
        case .transaction(let job): job.bundleID
        }
    }

    /// The environment the door read (`production`/`sandbox`), if any.
    public var environment: String? {
        switch self {
        case .receipt(let job): job.environment
        case .transaction(let job): job.environment
        }
    }

    /// What the client sent along.
    public var submission: Submission {
        switch self {
        case .receipt(let job): job.submission
        case .transaction(let job): job.submission
        }
    }

    /// Set when the door found it forged or not this app's: stored as fraud, never sent to Apple.
    public var fraudReason: String? {
        switch self {
        case .receipt(let job): job.fraudReason
        case .transaction(let job): job.fraudReason
        }
    }

    /// The transaction the Server API is asked about (see ``ReceiptJob/transactionID``).
    public var transactionID: String? {
        switch self {
        case .receipt(let job): job.transactionID
        case .transaction(let job): job.transactionID
        }
    }

    /// What the stored receipt row says it came from.
    public var source: JobSource {
        switch self {
        case .receipt: .receipt
        case .transaction(let job): job.source
        }
    }

    /// The bytes kept as the receipt row's receipt: the app receipt, the signed transaction, or
    /// nothing for a bare transaction id.
    public var receiptData: String {
        switch self {
        case .receipt(let job): job.receipt
        case .transaction(let job): job.signedTransaction ?? ""
        }
    }
}

/// An app receipt to validate.
public struct ReceiptJob: Sendable, Equatable {
    /// The receipt, base64 as normalized at ingestion. Secret: never logged.
    public var receipt: String
    /// Locally decoded facts, so a pending resource can be shown before Apple answers.
    public var style: ReceiptStyle?
    public var bundleID: String?
    public var environment: String?
    public var submission: Submission
    /// Set when the door found the receipt forged or not this app's (a bounded reason such as
    /// `signature_mismatch`): the worker stores it as fraud and never sends it to Apple.
    public var fraudReason: String?
    /// The transaction the Server API is asked about: from a receipt whose signature was checked at
    /// the door (empty when it holds no purchase), never from an unverified extraction: an attacker
    /// chooses those ids. Nil when the door did not check the signature.
    public var transactionID: String?

    /// Creates a receipt job.
    public init(
        receipt: String, style: ReceiptStyle? = nil, bundleID: String? = nil, environment: String? = nil,
        submission: Submission = Submission(), fraudReason: String? = nil, transactionID: String? = nil
    ) {
        self.receipt = receipt
        self.style = style
        self.bundleID = bundleID
        self.environment = environment
        self.submission = submission
        self.fraudReason = fraudReason
        self.transactionID = transactionID
    }
}

/// A StoreKit 2 transaction to validate with the App Store Server API.
public struct TransactionJob: Sendable, Equatable {
    /// The device's signed transaction (compact JWS, checked at the door); nil for a bare id.
    public var signedTransaction: String?
    /// The transaction asked about: the JWS's (nil when it was forged: its ids are the attacker's)
    /// or the client's bare id.
    public var transactionID: String?
    public var bundleID: String?
    public var environment: String?
    public var submission: Submission
    /// Set when the door found the JWS forged or not this app's.
    public var fraudReason: String?

    /// Where it came from: a signed transaction or a bare id.
    public var source: JobSource { signedTransaction == nil ? .transactionID : .signedTransaction }

    /// Creates a transaction job.
    public init(
        signedTransaction: String?, transactionID: String?, bundleID: String? = nil, environment: String? = nil,
        submission: Submission = Submission(), fraudReason: String? = nil
    ) {
        self.signedTransaction = signedTransaction
        self.transactionID = transactionID
        self.bundleID = bundleID
        self.environment = environment
        self.submission = submission
        self.fraudReason = fraudReason
    }
}

/// A re-poll of one subscription: its latest receipt is sent again (or, on the Server API, its
/// statuses are asked for).
public struct RepollJob: Sendable, Equatable {
    /// The subscription and where its answer is filed.
    public var target: RepollTarget
    /// The stored receipt's latest receipt, base64. Secret: never logged.
    public var latestReceipt: String
    public var style: ReceiptStyle?
    public var bundleID: String?
    /// The subscription's environment.
    public var environment: String?
    /// The user the subscription's receipt was posted for.
    public var userIdentifier: String?
    /// How the subscription's stored receipt came in: a StoreKit 2 transaction (signed, or an id)
    /// is known to the App Store Server API only, whatever the app's backend for receipts.
    public var source: JobSource

    /// Creates a re-poll.
    public init(
        target: RepollTarget, latestReceipt: String, style: ReceiptStyle? = nil, bundleID: String? = nil, environment: String? = nil,
        userIdentifier: String? = nil, source: JobSource = .receipt
    ) {
        self.source = source
        self.target = target
        self.latestReceipt = latestReceipt
        self.style = style
        self.bundleID = bundleID
        self.environment = environment
        self.userIdentifier = userIdentifier
    }
}

/// An App Store Server Notification as the door accepted it.
public struct NotificationJob: Sendable, Equatable {
    /// Apple's `notificationUUID` (V2) or the body's digest (V1): the key it is stored under exactly once.
    public var notificationID: String
    /// The V2 `signedPayload` (checked at the door), or the V1 body without its `password`.
    public var body: String
    public var bundleID: String?
    public var environment: String?

    /// Creates a notification job.
    public init(notificationID: String, body: String, bundleID: String? = nil, environment: String? = nil) {
        self.notificationID = notificationID
        self.body = body
        self.bundleID = bundleID
        self.environment = environment
    }
}

/// Apple's `CONSUMPTION_REQUEST` for one transaction, to answer before its deadline. The worker
/// turns the stored notification's job into it, so it exists once for each request stored.
public struct ConsumptionJob: Sendable, Equatable {
    /// The request's `notificationUUID`: the answer is recorded under it once.
    public var notificationID: String
    /// The transaction the customer asked a refund of.
    public var transactionID: String
    /// When Apple stops waiting (12 hours after it signed the request).
    public var deadline: Date
    public var bundleID: String?
    public var environment: String?

    /// Creates a consumption job.
    public init(notificationID: String, transactionID: String, deadline: Date, bundleID: String? = nil, environment: String? = nil) {
        self.notificationID = notificationID
        self.transactionID = transactionID
        self.deadline = deadline
        self.bundleID = bundleID
        self.environment = environment
    }
}

/// One event delivered to one endpoint.
public struct WebhookDelivery: Sendable, Equatable {
    /// The delivery's row, endpoint and event.
    public var target: WebhookTarget
    /// The event's JSON: the request body.
    public var body: String

    /// Creates a delivery.
    public init(target: WebhookTarget, body: String) {
        self.target = target
        self.body = body
    }
}

/// A receipt or transaction brought by a bulk import. It waits in the `import` queue, which workers
/// serve only with spare capacity, so a backfill never delays live purchases.
public struct ImportItem: Sendable, Equatable {
    /// The import it belongs to.
    public var importID: UUID
    /// Whether its changes become events (and webhooks): off unless the import asked
    /// (`receiptq import --events`), so a backfill does not flood the customer's endpoint.
    public var emitsEvents: Bool
    /// What it validates.
    public var purchase: PurchaseJob

    /// Creates an import item.
    public init(importID: UUID, emitsEvents: Bool, purchase: PurchaseJob) {
        self.importID = importID
        self.emitsEvents = emitsEvents
        self.purchase = purchase
    }
}

/// The subscription a re-poll asks Apple about, and where its answer is filed.
public struct RepollTarget: Sendable, Equatable, Codable {
    /// The subscription's key within the app and environment.
    public var originalTransactionID: String
    /// The stored receipt whose latest receipt is re-sent: Apple's new transactions are filed under it.
    public var receiptID: UUID
    /// The scheduler's poll counter when the job was queued (one job per subscription and value).
    public var pollSequence: Int

    enum CodingKeys: String, CodingKey {
        case originalTransactionID = "original_transaction_id"
        case receiptID = "receipt_id"
        case pollSequence = "poll_seq"
    }

    /// Creates a target.
    public init(originalTransactionID: String, receiptID: UUID, pollSequence: Int) {
        self.originalTransactionID = originalTransactionID
        self.receiptID = receiptID
        self.pollSequence = pollSequence
    }
}

/// The delivery a webhook job makes: one event to one endpoint.
public struct WebhookTarget: Sendable, Equatable, Codable {
    /// The `webhook_deliveries` row.
    public var deliveryID: Int64
    public var endpointID: UUID
    public var eventID: UUID
    public var eventType: String

    enum CodingKeys: String, CodingKey {
        case deliveryID = "delivery_id"
        case endpointID = "endpoint_id"
        case eventID = "event_id"
        case eventType = "event_type"
    }

    /// Creates a target.
    public init(deliveryID: Int64, endpointID: UUID, eventID: UUID, eventType: String) {
        self.deliveryID = deliveryID
        self.endpointID = endpointID
        self.eventID = eventID
        self.eventType = eventType
    }
}

/// What the client sent along with the receipt, kept as given.
public struct Submission: Sendable, Equatable, Codable {
    public var userIdentifier: String?
    public var identifierForVendor: String?
    public var countryCode: String?
    /// The end user's address; nil when the client sent JSON `null` to keep it unstored.
    public var ipAddress: String?
    public var metadata: JSONValue?
    /// The app account token the app set at purchase for this user: the worker registers the
    /// mapping (token → user) with the result.
    public var appAccountToken: UUID?

    enum CodingKeys: String, CodingKey {
        case appAccountToken = "app_account_token"
        case userIdentifier = "user_identifier"
        case identifierForVendor = "identifier_for_vendor"
        case countryCode = "country_code"
        case ipAddress = "ip_address"
        case metadata
    }

    /// Creates a submission.
    public init(
        userIdentifier: String? = nil, identifierForVendor: String? = nil, countryCode: String? = nil,
        ipAddress: String? = nil, metadata: JSONValue? = nil, appAccountToken: UUID? = nil
    ) {
        self.appAccountToken = appAccountToken
        self.userIdentifier = userIdentifier
        self.identifierForVendor = identifierForVendor
        self.countryCode = countryCode
        self.ipAddress = ipAddress
        self.metadata = metadata
    }
}
