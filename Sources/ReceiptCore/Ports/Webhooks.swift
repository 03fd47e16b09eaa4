import Foundation

/// A webhook endpoint as the worker needs it to deliver.
public struct WebhookEndpointRecord: Sendable, Equatable, CustomStringConvertible {
    public var id: UUID
    public var appID: UUID
    public var url: String
    /// The signing secrets, newest first: two during a rotation (both sign, so a receiver that
    /// knows either accepts). Secret: never logged or shown.
    public var secrets: [String]
    /// Whether loopback, private and link-local addresses may be called (an admin's explicit choice).
    public var allowPrivate: Bool
    /// Set while the endpoint is paused (failing for a day, or by an operator): nothing is sent.
    public var pausedAt: Date?
    /// Set while deliveries fail: the start of the current run of failures.
    public var failingSince: Date?

    /// Creates a record.
    public init(
        id: UUID, appID: UUID, url: String, secrets: [String], allowPrivate: Bool = false, pausedAt: Date? = nil, failingSince: Date? = nil
    ) {
        self.id = id
        self.appID = appID
        self.url = url
        self.secrets = secrets
        self.allowPrivate = allowPrivate
        self.pausedAt = pausedAt
        self.failingSince = failingSince
    }

    public var description: String {
        "WebhookEndpointRecord(id: \(id.canonical), app: \(appID.canonical), secrets: <\(secrets.count) redacted>)"
    }
}

/// One delivery attempt to send.
public struct WebhookRequest: Sendable, Equatable, CustomStringConvertible {
    public var url: String
    /// The event's JSON, exactly as signed.
    public var body: [UInt8]
    public var eventID: UUID
    public var eventType: String
    /// Newest first. Secret.
    public var secrets: [String]
    /// The signature's `t`: when the attempt is made (Unix seconds).
    public var timestamp: Int64
    public var allowPrivate: Bool

    /// Creates a request.
    public init(url: String, body: [UInt8], eventID: UUID, eventType: String, secrets: [String], timestamp: Int64, allowPrivate: Bool) {
        self.url = url
        self.body = body
        self.eventID = eventID
        self.eventType = eventType
        self.secrets = secrets
        self.timestamp = timestamp
        self.allowPrivate = allowPrivate
    }

    /// Without the secrets or the body, so a request interpolated into a log line leaks nothing.
    public var description: String {
        "WebhookRequest(event: \(eventID.canonical), type: \(eventType), secrets: <\(secrets.count) redacted>)"
    }
}

/// How one delivery attempt went.
public struct WebhookReport: Sendable, Equatable {
    /// The endpoint's HTTP status; nil when no answer came (timeout, refused, TLS, address not allowed).
    public var httpStatus: Int?
    /// Why it failed (`transport_timeout`, `transport_tls`, `address_not_allowed`, `http_503`, …).
    public var errorCode: FailureCode?
    public var latencyMs: Int

    /// Creates a report.
    public init(httpStatus: Int?, errorCode: FailureCode?, latencyMs: Int) {
        self.httpStatus = httpStatus
        self.errorCode = errorCode
        self.latencyMs = latencyMs
    }

    /// A 2xx: delivered. Anything else is tried again (with backoff) until the retry budget is spent.
    public var isDelivered: Bool { (200..<300).contains(httpStatus ?? 0) }
}

/// Sends webhook deliveries, many at once (libcurl multi). Never fails: transport failures are
/// part of the report.
public protocol WebhookSender: Sendable {
    /// Signs and posts one delivery; calls `completion` exactly once, on any thread, quickly.
    func deliver(_ request: WebhookRequest, completion: @escaping @Sendable (WebhookReport) -> Void)
}

/// What a delivery job leaves in Postgres: its row's status and the endpoint's run of failures.
public struct DeliveryOutcome: Sendable, Equatable {
    public enum Status: String, Sendable, Equatable {
        case delivered
        /// Failed; queued again for a later attempt.
        case retrying
        /// The retry budget is spent: in the dead letters.
        case dead
    }

    public var target: WebhookTarget
    public var status: Status
    public var attempts: Int
    public var httpStatus: Int?
    public var errorCode: FailureCode?
    public var at: Date

    /// Creates an outcome.
    public init(target: WebhookTarget, status: Status, attempts: Int, httpStatus: Int?, errorCode: FailureCode?, at: Date) {
        self.target = target
        self.status = status
        self.attempts = attempts
        self.httpStatus = httpStatus
        self.errorCode = errorCode
        self.at = at
    }
}

/// A delivery the dispatcher hands to the queue.
public struct WebhookDispatch: Sendable, Equatable {
    public var target: WebhookTarget
    public var appID: UUID
    /// The event's JSON (the body every attempt sends).
    public var body: [UInt8]

    /// Creates a dispatch.
    public init(target: WebhookTarget, appID: UUID, body: [UInt8]) {
        self.target = target
        self.appID = appID
        self.body = body
    }

    /// The `webhook` job for it.
    public func job(id: UUID, at date: Date) -> JobEnvelope {
        JobEnvelope(
            id: id, appID: appID, enqueuedAt: date, origin: .outbox,
            payload: .delivery(WebhookDelivery(target: target, body: String(decoding: body, as: UTF8.self))))
    }
}

/// The Postgres side of the webhook dispatcher (blocking; one thread owns it).
public protocol WebhookOutbox: AnyObject {
    /// In one transaction: locks up to `limit` pending deliveries that may go now (each the first
    /// unsettled one of its endpoint and ordering key, its endpoint not paused), skipping those
    /// another dispatcher holds, marks them `queued` and passes them to `enqueue` before it
    /// commits: if `enqueue` throws, nothing is marked.
    /// - Returns: how many were claimed and queued.
    func claimPending(limit: Int, enqueue: ([WebhookDispatch]) throws -> Void) throws -> Int
    /// How many endpoints are paused now (failing for a day, or by an operator).
    func pausedEndpoints() throws -> Int
    /// In one transaction: locks up to `limit` deliveries `queued` for longer than `olderThan`
    /// (oldest first, skipping those another dispatcher holds), passes them to `requeue` and
    /// marks them checked now, so each is looked at once per `olderThan`. A delivery whose job
    /// Redis lost (a failover without replica acknowledgement, a restart that lost its last
    /// writes) would otherwise stay `queued`, holding back every later event of its user, for good.
    /// - Returns: how many were checked, and how many `requeue` queued again.
    func recheckQueued(olderThan: Duration, limit: Int, requeue: ([WebhookDispatch]) throws -> Int) throws -> (checked: Int, requeued: Int)
}

/// The Redis side of the webhook dispatcher: queues each delivery once.
public protocol WebhookQueue: AnyObject {
    /// Queues the deliveries' jobs, skipping any already queued (a dispatcher that crashed before
    /// its commit queues them again): when it returns, every one of them is queued.
    func enqueue(_ dispatches: [WebhookDispatch], at date: Date) throws
    /// Queues again those of the deliveries whose job Redis no longer holds (their marker is
    /// gone with it), and keeps the others' markers alive: a delivery held back for days by a
    /// paused endpoint must not outlive its marker.
    /// - Returns: how many were queued again.
    func requeueLost(_ dispatches: [WebhookDispatch], at date: Date) throws -> Int
}
