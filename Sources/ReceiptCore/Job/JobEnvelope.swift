import Foundation

/// What kind of work a job is.
public enum JobKind: String, Sendable, Codable, CaseIterable {
    /// First validation of a receipt a client posted.
    case validate
    /// A re-poll of a subscription before it expires.
    case repoll
    /// An App Store Server Notification (V2 signed, or V1), checked at the door: applied to the
    /// ledger and subscriptions without a call to Apple.
    case notification
    /// A webhook delivery of one event to one endpoint of the customer's backend.
    case webhook
}

/// Who put the job on the queue.
public enum JobOrigin: String, Sendable, Codable {
    case api
    case scheduler
    case dashboard
    case cli
    /// The Cloud Softphone provider web service (`/cloudsoftphone/iap`).
    case softphone
    /// Apple's App Store Server Notifications endpoint (`/apple/notifications/…`).
    case apple
    /// The scheduler's Get Notification History sweep.
    case history
    /// The webhook dispatcher, from the events outbox.
    case outbox
}

/// The subscription a `repoll` job asks Apple about, and where its answer is filed.
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

/// The delivery a `webhook` job makes: one event to one endpoint.
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

    enum CodingKeys: String, CodingKey {
        case userIdentifier = "user_identifier"
        case identifierForVendor = "identifier_for_vendor"
        case countryCode = "country_code"
        case ipAddress = "ip_address"
        case metadata
    }

    /// Creates a submission.
    public init(
        userIdentifier: String? = nil, identifierForVendor: String? = nil, countryCode: String? = nil,
        ipAddress: String? = nil, metadata: JSONValue? = nil
    ) {
        self.userIdentifier = userIdentifier
        self.identifierForVendor = identifierForVendor
        self.countryCode = countryCode
        self.ipAddress = ipAddress
        self.metadata = metadata
    }
}

extension JobEnvelope: CustomStringConvertible {
    /// A description without the receipt or the client's data, so an envelope interpolated into a
    /// log line leaks nothing.
    public var description: String {
        "JobEnvelope(id: \(id), kind: \(kind.rawValue), app: \(appID), attempt: \(attempt), error: \(errorCode ?? "none"))"
    }
}

/// The versioned JSON a job travels in through Redis (queue, processing, retry and dead sets).
///
/// Sidekiq-style: the envelope carries its own failure history, so the dead letters are
/// self-describing. `errorMessage` is redacted and bounded; the receipt itself never leaves
/// `receipt`.
public struct JobEnvelope: Sendable, Equatable, Codable {
    /// The envelope format; bumped when a field changes meaning.
    public static let currentVersion = 1

    public var v: Int
    /// The job id, which is also the receipt id (UUIDv7).
    public var id: UUID
    public var kind: JobKind
    /// The registered app the receipt belongs to.
    public var appID: UUID
    /// How many validation attempts have failed since the job was queued, or last retried by an
    /// operator (``requeued(by:)`` resets it; `history` keeps every call).
    public var attempt: Int
    public var enqueuedAt: Date
    public var firstFailedAt: Date?
    public var lastFailedAt: Date?
    /// A bounded error code of the last failure (`timeout`, `apple_21005`, `shared_secret_mismatch`, …).
    public var errorCode: String?
    /// A short, redacted description of the last failure.
    public var errorMessage: String?
    public var origin: JobOrigin
    /// The receipt, base64 as normalized at ingestion.
    public var receipt: String
    /// Locally decoded facts, so a pending resource can be shown before Apple answers.
    public var style: ReceiptStyle?
    public var bundleID: String?
    public var environment: String?
    public var submission: Submission
    /// Every call made to Apple for this job, across attempts (the audit trail of a dead letter).
    public var history: [AppleCall]
    /// Set when the ingestion node found the receipt forged or not this app's (a bounded reason such
    /// as `signature_mismatch` or `bundle_id_not_registered`): the worker stores it as fraud and
    /// never sends it to Apple.
    public var fraudReason: String?
    /// The ingestion node waiting for the result (its result channel), if one is; nil otherwise.
    public var replyTo: String?
    /// For a `repoll` job: the subscription it polls (the job id is then not a receipt id).
    public var subscription: RepollTarget?
    /// What `receipt` holds: an app receipt (nil, the first wave's jobs), a StoreKit 2 signed
    /// transaction, or nothing but `transactionID`.
    public var source: JobSource?
    /// The transaction the Server API is asked about: from the client, from a signed transaction
    /// checked at the door, or from a receipt whose signature was checked at the door (never from
    /// an unverified extraction: an attacker chooses those ids).
    public var transactionID: String?
    /// For a `notification` job: Apple's `notificationUUID` (V2) or the body's digest (V1), the key
    /// it is stored under exactly once.
    public var notificationID: String?
    /// For a `webhook` job: the delivery it makes (`receipt` then holds the event's JSON, the body).
    public var webhook: WebhookTarget?
    /// For a receipt brought by a bulk import (`POST …/batch`, `receiptq import`): the import it
    /// belongs to. Such a validation waits in the `import` queue, which workers serve only with
    /// spare capacity, so a backfill never delays live purchases.
    public var importID: UUID?
    /// For an import's job: whether its changes become events (and webhooks). Off unless the
    /// import asked (`receiptq import --events`), so a backfill does not flood the customer's endpoint.
    public var importEvents: Bool?

    /// Whether this job's changes are recorded without events: an import that did not ask for them.
    public var isQuiet: Bool { importID != nil && importEvents != true }

    /// The queue of bulk imports' validations (``importID``).
    public static let importQueue = "import"

    /// The Redis list this job waits in: its kind's, or ``importQueue`` for an import's validation
    /// (also after a retry, a rescue or an operator's requeue).
    public var queueName: String { importID != nil && kind == .validate ? Self.importQueue : kind.rawValue }

    // Explicit keys: the snake_case strategies do not round-trip `appID`/`bundleID`.
    enum CodingKeys: String, CodingKey {
        case v, id, kind, attempt, origin, receipt, style, environment, submission, history
        case appID = "app_id"
        case enqueuedAt = "enqueued_at"
        case firstFailedAt = "first_failed_at"
        case lastFailedAt = "last_failed_at"
        case errorCode = "error_code"
        case errorMessage = "error_message"
        case bundleID = "bundle_id"
        case fraudReason = "fraud_reason"
        case replyTo = "reply_to"
        case subscription, source
        case transactionID = "transaction_id"
        case notificationID = "notification_id"
        case webhook
        case importID = "import_id"
        case importEvents = "import_events"
    }

    /// Creates an envelope for a new job.
    public init(
        id: UUID, kind: JobKind, appID: UUID, enqueuedAt: Date, origin: JobOrigin, receipt: String,
        style: ReceiptStyle? = nil, bundleID: String? = nil, environment: String? = nil,
        submission: Submission = Submission(), fraudReason: String? = nil, subscription: RepollTarget? = nil,
        source: JobSource? = nil, transactionID: String? = nil
    ) {
        self.source = source
        self.transactionID = transactionID
        self.v = Self.currentVersion
        self.id = id
        self.kind = kind
        self.appID = appID
        self.attempt = 0
        self.enqueuedAt = enqueuedAt
        self.origin = origin
        self.receipt = receipt
        self.style = style
        self.bundleID = bundleID
        self.environment = environment
        self.submission = submission
        self.history = []
        self.fraudReason = fraudReason
        self.subscription = subscription
    }

    /// The envelope after a failed attempt.
    /// - Parameters:
    ///   - code: bounded error code.
    ///   - message: redacted description (truncated to 200 characters).
    ///   - calls: the Apple calls of this attempt.
    ///   - now: when it failed.
    public func failed(code: String, message: String, calls: [AppleCall], at now: Date) -> JobEnvelope {
        var copy = self
        copy.attempt += 1
        copy.firstFailedAt = copy.firstFailedAt ?? now
        copy.lastFailedAt = now
        copy.errorCode = code
        copy.errorMessage = String(message.prefix(200))
        copy.history.append(contentsOf: calls)
        // Bound the history: a job retried for days must not grow without limit.
        if copy.history.count > 50 { copy.history.removeFirst(copy.history.count - 50) }
        return copy
    }

    /// The JSON bytes stored in Redis (sorted keys, absent values omitted; `decode` reads them).
    ///
    /// Written directly rather than with `JSONEncoder`, which spent most of its time escaping the
    /// receipt's base64 on every request.
    public func encoded() -> [UInt8] {
        var writer = JSONWriter(capacity: receipt.utf8.count + 1024)
        writer.openObject()
        writer.member("app_id", appID.canonical)
        writer.member("attempt", attempt)
        writer.member("bundle_id", bundleID)
        writer.member("enqueued_at", milliseconds: enqueuedAt)
        writer.member("environment", environment)
        writer.member("error_code", errorCode)
        writer.member("error_message", errorMessage)
        writer.member("first_failed_at", milliseconds: firstFailedAt)
        writer.member("fraud_reason", fraudReason)
        writer.key("history")
        writer.openArray()
        for call in history {
            writer.openObject()
            writer.member("apple_status", call.appleStatus)
            writer.member("endpoint", call.endpoint.rawValue)
            writer.member("error_code", call.errorCode)
            writer.member("http_status", call.httpStatus)
            writer.member("is_retryable", call.isRetryable)
            writer.member("latency_ms", call.latencyMs)
            writer.closeObject()
        }
        writer.closeArray()
        writer.member("id", id.canonical)
        writer.member("import_events", importEvents)
        writer.member("import_id", importID?.canonical)
        writer.member("kind", kind.rawValue)
        writer.member("last_failed_at", milliseconds: lastFailedAt)
        writer.member("notification_id", notificationID)
        writer.member("origin", origin.rawValue)
        writer.member("receipt", receipt)
        writer.member("reply_to", replyTo)
        writer.member("source", source?.rawValue)
        writer.member("style", style?.rawValue)
        writer.key("submission")
        writer.openObject()
        writer.member("country_code", submission.countryCode)
        writer.member("identifier_for_vendor", submission.identifierForVendor)
        writer.member("ip_address", submission.ipAddress)
        writer.member("metadata", submission.metadata)
        writer.member("user_identifier", submission.userIdentifier)
        writer.closeObject()
        if let subscription {
            writer.key("subscription")
            writer.openObject()
            writer.member("original_transaction_id", subscription.originalTransactionID)
            writer.member("poll_seq", subscription.pollSequence)
            writer.member("receipt_id", subscription.receiptID.canonical)
            writer.closeObject()
        }
        writer.member("transaction_id", transactionID)
        writer.member("v", v)
        if let webhook {
            writer.key("webhook")
            writer.openObject()
            writer.member("delivery_id", Int(webhook.deliveryID))
            writer.member("endpoint_id", webhook.endpointID.canonical)
            writer.member("event_id", webhook.eventID.canonical)
            writer.member("event_type", webhook.eventType)
            writer.closeObject()
        }
        writer.closeObject()
        return writer.bytes
    }
}
