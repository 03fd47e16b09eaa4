import Foundation

/// The envelope's JSON in Redis, version 1: one flat object whose fields a payload case fills in
/// part. It is the format every release so far has queued, so a job queued before an upgrade is
/// still read after it; the Redis scripts read its `kind` and `import_id`.
///
/// Only this file and the readers in `JobEnvelope+Decode.swift` know it: everything else sees a
/// ``JobHeader`` and a ``JobPayload``.
struct JobWire: Sendable, Equatable, Codable {
    var v: Int
    var id: UUID
    var kind: JobKind
    var appID: UUID
    var attempt: Int
    var enqueuedAt: Date
    var firstFailedAt: Date?
    var lastFailedAt: Date?
    var errorCode: String?
    var errorMessage: String?
    var origin: JobOrigin
    /// The payload's bytes: the receipt, the signed transaction, the notification or the event.
    var receipt: String
    var style: ReceiptStyle?
    var bundleID: String?
    var environment: String?
    var submission: Submission
    var history: [AppleCall]
    var fraudReason: String?
    var replyTo: String?
    var subscription: RepollTarget?
    var source: JobSource?
    var transactionID: String?
    var notificationID: String?
    var webhook: WebhookTarget?
    var importID: UUID?
    var importEvents: Bool?
    /// A consumption job's deadline: present only on one (a notification job has none).
    var consumptionDeadline: Date?

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
        case consumptionDeadline = "consumption_deadline"
    }
}

extension JobEnvelope {
    /// Why a well-formed JSON object is not an envelope: a field its kind needs is missing, or
    /// fields of two kinds are mixed.
    struct WireMismatch: Error, CustomStringConvertible {
        var description: String
    }

    /// The envelope a wire object describes.
    /// - Throws: ``WireMismatch`` when the fields do not make one payload.
    init(wire: JobWire) throws {
        var header = JobHeader(id: wire.id, appID: wire.appID, enqueuedAt: wire.enqueuedAt, origin: wire.origin)
        header.version = wire.v
        header.attempt = wire.attempt
        header.firstFailedAt = wire.firstFailedAt
        header.lastFailedAt = wire.lastFailedAt
        header.errorCode = wire.errorCode.map(FailureCode.init(rawValue:))
        header.errorMessage = wire.errorMessage
        header.replyTo = wire.replyTo
        header.history = wire.history
        self.init(header: header, payload: try Self.payload(wire))
    }

    private static func payload(_ wire: JobWire) throws -> JobPayload {
        switch wire.kind {
        case .validate:
            let purchase = try purchase(wire)
            guard let importID = wire.importID else { return purchase.payload }
            return .importItem(ImportItem(importID: importID, emitsEvents: wire.importEvents == true, purchase: purchase))
        case .repoll:
            guard let target = wire.subscription else { throw WireMismatch(description: "a repoll job without its subscription") }
            return .repoll(
                RepollJob(
                    target: target, latestReceipt: wire.receipt, style: wire.style, bundleID: wire.bundleID, environment: wire.environment,
                    userIdentifier: wire.submission.userIdentifier, source: wire.source ?? .receipt))
        case .notification:
            guard let id = wire.notificationID else { throw WireMismatch(description: "a notification job without its notification id") }
            if let deadline = wire.consumptionDeadline {
                guard let transactionID = wire.transactionID else {
                    throw WireMismatch(description: "a consumption job without its transaction id")
                }
                return .consumption(
                    ConsumptionJob(
                        notificationID: id, transactionID: transactionID, deadline: deadline, bundleID: wire.bundleID,
                        environment: wire.environment))
            }
            return .notification(NotificationJob(notificationID: id, body: wire.receipt, bundleID: wire.bundleID, environment: wire.environment))
        case .webhook:
            guard let target = wire.webhook else { throw WireMismatch(description: "a webhook job without its delivery") }
            return .delivery(WebhookDelivery(target: target, body: wire.receipt))
        }
    }

    private static func purchase(_ wire: JobWire) throws -> PurchaseJob {
        switch wire.source ?? .receipt {
        case .receipt:
            return .receipt(
                ReceiptJob(
                    receipt: wire.receipt, style: wire.style, bundleID: wire.bundleID, environment: wire.environment,
                    submission: wire.submission, fraudReason: wire.fraudReason, transactionID: wire.transactionID))
        case .signedTransaction, .transactionID:
            return .transaction(
                TransactionJob(
                    signedTransaction: wire.source == .signedTransaction ? wire.receipt : nil, transactionID: wire.transactionID,
                    bundleID: wire.bundleID, environment: wire.environment, submission: wire.submission, fraudReason: wire.fraudReason))
        case .notification:
            throw WireMismatch(description: "a validation job of source notification")
        }
    }

    /// The wire object of this envelope.
    var wire: JobWire {
        var wire = JobWire(
            v: header.version, id: header.id, kind: kind, appID: header.appID, attempt: header.attempt, enqueuedAt: header.enqueuedAt,
            firstFailedAt: header.firstFailedAt, lastFailedAt: header.lastFailedAt, errorCode: header.errorCode?.rawValue,
            errorMessage: header.errorMessage, origin: header.origin, receipt: "", submission: Submission(), history: header.history,
            replyTo: header.replyTo)
        switch payload {
        case .receipt(let job):
            wire.fill(.receipt(job))
        case .transaction(let job):
            wire.fill(.transaction(job))
        case .importItem(let item):
            wire.fill(item.purchase)
            wire.importID = item.importID
            wire.importEvents = item.emitsEvents ? true : nil
        case .repoll(let job):
            wire.receipt = job.latestReceipt
            wire.style = job.style
            wire.bundleID = job.bundleID
            wire.environment = job.environment
            wire.submission = Submission(userIdentifier: job.userIdentifier)
            wire.subscription = job.target
            // Absent for a receipt, as for validations: the jobs queued before this field still read.
            wire.source = job.source == .receipt ? nil : job.source
        case .notification(let job):
            wire.receipt = job.body
            wire.bundleID = job.bundleID
            wire.environment = job.environment
            wire.notificationID = job.notificationID
        case .delivery(let delivery):
            wire.receipt = delivery.body
            wire.webhook = delivery.target
        case .consumption(let job):
            wire.bundleID = job.bundleID
            wire.environment = job.environment
            wire.notificationID = job.notificationID
            wire.transactionID = job.transactionID
            wire.consumptionDeadline = job.deadline
        }
        return wire
    }

    /// The JSON bytes stored in Redis (sorted keys, absent values omitted; `decode` reads them).
    ///
    /// Written directly rather than with `JSONEncoder`, which spent most of its time escaping the
    /// receipt's base64 on every request.
    public func encoded() -> [UInt8] { wire.encoded() }
}

extension JobWire {
    init(
        v: Int, id: UUID, kind: JobKind, appID: UUID, attempt: Int, enqueuedAt: Date, firstFailedAt: Date?, lastFailedAt: Date?,
        errorCode: String?, errorMessage: String?, origin: JobOrigin, receipt: String, submission: Submission, history: [AppleCall],
        replyTo: String?
    ) {
        self.v = v
        self.id = id
        self.kind = kind
        self.appID = appID
        self.attempt = attempt
        self.enqueuedAt = enqueuedAt
        self.firstFailedAt = firstFailedAt
        self.lastFailedAt = lastFailedAt
        self.errorCode = errorCode
        self.errorMessage = errorMessage
        self.origin = origin
        self.receipt = receipt
        self.submission = submission
        self.history = history
        self.replyTo = replyTo
    }

    /// The fields of a receipt or a transaction. A receipt leaves `source` absent, as the first
    /// wave's jobs did.
    fileprivate mutating func fill(_ purchase: PurchaseJob) {
        switch purchase {
        case .receipt(let job):
            receipt = job.receipt
            style = job.style
            transactionID = job.transactionID
        case .transaction(let job):
            receipt = job.signedTransaction ?? ""
            source = job.source
            transactionID = job.transactionID
        }
        bundleID = purchase.bundleID
        environment = purchase.environment
        submission = purchase.submission
        fraudReason = purchase.fraudReason
    }

    func encoded() -> [UInt8] {
        var writer = JSONWriter(capacity: receipt.utf8.count + 1024)
        writer.openObject()
        writer.member("app_id", appID.canonical)
        writer.member("attempt", attempt)
        writer.member("bundle_id", bundleID)
        writer.member("consumption_deadline", milliseconds: consumptionDeadline)
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
            writer.member("error_code", call.errorCode?.rawValue)
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
        writer.member("app_account_token", submission.appAccountToken?.canonical)
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

extension PurchaseJob {
    /// The job of a purchase validated on its own (not an import's item).
    public var payload: JobPayload {
        switch self {
        case .receipt(let job): .receipt(job)
        case .transaction(let job): .transaction(job)
        }
    }
}

extension JobEnvelope: Encodable {
    /// The same JSON as ``encoded()``, through `Encodable` (with dates as milliseconds): the
    /// reference the tests hold the direct writer to.
    public func encode(to encoder: any Encoder) throws { try wire.encode(to: encoder) }
}
