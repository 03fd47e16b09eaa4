import Foundation

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
    /// An operator's resync (admin API, dashboard, command line): the customer's whole history is
    /// read again from its start, whatever revision was stored.
    case resync
}

/// What every job has, whatever it does: its identity, where it came from, who waits for it, and its
/// failure history.
///
/// Sidekiq-style: the header carries the job's own failure history, so the dead letters are
/// self-describing. `errorMessage` is redacted and bounded.
public struct JobHeader: Sendable, Equatable {
    /// The envelope format; bumped when a field changes meaning.
    public var version: Int
    /// The job id, which is also the receipt id (UUIDv7) of a validation.
    public var id: UUID
    /// The registered app the job belongs to.
    public var appID: UUID
    /// How many attempts have failed since the job was queued, or last retried by an operator
    /// (``JobEnvelope/requeued(by:)`` resets it; `history` keeps every call).
    public var attempt: Int
    public var enqueuedAt: Date
    public var firstFailedAt: Date?
    public var lastFailedAt: Date?
    /// Why the last attempt failed (`transport_timeout`, `apple_21005`, `shared_secret_mismatch`, …).
    public var errorCode: FailureCode?
    /// A short, redacted description of the last failure.
    public var errorMessage: String?
    public var origin: JobOrigin
    /// The ingestion node waiting for the result (its result channel), if one is; nil otherwise.
    public var replyTo: String?
    /// Every call made to Apple for this job, across attempts (the audit trail of a dead letter).
    public var history: [AppleCall]

    /// Creates the header of a new job.
    public init(id: UUID, appID: UUID, enqueuedAt: Date, origin: JobOrigin) {
        self.version = JobEnvelope.currentVersion
        self.id = id
        self.appID = appID
        self.attempt = 0
        self.enqueuedAt = enqueuedAt
        self.origin = origin
        self.history = []
    }
}

/// A job as it travels through Redis (queue, processing, retry and dead sets): a header plus one
/// payload case.
///
/// The header's fields read through the envelope (`envelope.id`, `envelope.attempt`); what a job
/// does is read by switching over ``payload``.
@dynamicMemberLookup
public struct JobEnvelope: Sendable, Equatable {
    /// The envelope format; bumped when a field changes meaning.
    public static let currentVersion = 1

    /// Identity, origin and failure history.
    public var header: JobHeader
    /// What the job does.
    public var payload: JobPayload

    /// Creates an envelope.
    public init(header: JobHeader, payload: JobPayload) {
        self.header = header
        self.payload = payload
    }

    /// Creates the envelope of a new job.
    public init(id: UUID, appID: UUID, enqueuedAt: Date, origin: JobOrigin, payload: JobPayload) {
        self.init(header: JobHeader(id: id, appID: appID, enqueuedAt: enqueuedAt, origin: origin), payload: payload)
    }

    /// The header's fields, read and written through the envelope.
    public subscript<T>(dynamicMember keyPath: WritableKeyPath<JobHeader, T>) -> T {
        get { header[keyPath: keyPath] }
        set { header[keyPath: keyPath] = newValue }
    }

    /// The queue family and metric label.
    public var kind: JobKind { payload.kind }

    /// The import this job's item belongs to, if it is one.
    public var importID: UUID? {
        guard case .importItem(let item) = payload else { return nil }
        return item.importID
    }

    /// Whether this job's changes are recorded without events: an import that did not ask for them.
    public var isQuiet: Bool {
        guard case .importItem(let item) = payload else { return false }
        return !item.emitsEvents
    }

    /// The queue of bulk imports' validations (``ImportItem``).
    public static let importQueue = "import"

    /// The Redis list this job waits in: its kind's, or ``importQueue`` for an import's item (also
    /// after a retry, a rescue or an operator's requeue).
    public var queueName: String { importID != nil ? Self.importQueue : kind.rawValue }

    /// The envelope after a failed attempt.
    /// - Parameters:
    ///   - code: why it failed.
    ///   - message: redacted description (truncated to 200 characters).
    ///   - calls: the Apple calls of this attempt.
    ///   - now: when it failed.
    public func failed(code: FailureCode, message: String, calls: [AppleCall], at now: Date) -> JobEnvelope {
        var copy = self
        copy.header.attempt += 1
        copy.header.firstFailedAt = copy.header.firstFailedAt ?? now
        copy.header.lastFailedAt = now
        copy.header.errorCode = code
        copy.header.errorMessage = String(message.prefix(200))
        copy.header.history.append(contentsOf: calls)
        // Bound the history: a job retried for days must not grow without limit.
        if copy.header.history.count > 50 { copy.header.history.removeFirst(copy.header.history.count - 50) }
        return copy
    }
}

extension JobEnvelope: CustomStringConvertible {
    /// A description without the receipt or the client's data, so an envelope interpolated into a
    /// log line leaks nothing.
    public var description: String {
        "JobEnvelope(id: \(header.id), kind: \(kind.rawValue), app: \(header.appID), attempt: \(header.attempt), error: \(header.errorCode?.rawValue ?? "none"))"
    }
}
