import Foundation

/// A registered app: its bundle id and the shared secret it validates with.
public struct AppRecord: Sendable, Equatable, CustomStringConvertible {
    public var id: UUID
    public var name: String
    public var bundleID: String
    /// Apple's app-specific shared secret (`password`). Secret: never logged or shown.
    public var sharedSecret: String?
    public var excludeOldTransactions: Bool

    /// Creates an app record.
    public init(id: UUID, name: String, bundleID: String, sharedSecret: String?, excludeOldTransactions: Bool = false) {
        self.id = id
        self.name = name
        self.bundleID = bundleID
        self.sharedSecret = sharedSecret
        self.excludeOldTransactions = excludeOldTransactions
    }

    public var description: String {
        "AppRecord(id: \(id), name: \(name), bundleID: \(bundleID), sharedSecret: \(sharedSecret == nil ? "none" : "<redacted>"))"
    }
}

/// A job taken from the queue: the exact bytes (needed to acknowledge it) and the parsed envelope.
public struct ReservedJob: Sendable, Equatable {
    /// The bytes as stored in Redis.
    public var raw: [UInt8]
    /// The parsed envelope, or nil when the bytes are not a valid envelope (a poison job).
    public var envelope: JobEnvelope?

    /// Wraps reserved bytes, parsing the envelope.
    public init(raw: [UInt8]) {
        self.raw = raw
        self.envelope = try? JobEnvelope.decode(raw)
    }
}

/// The queue as one worker lane sees it. Blocking: each lane owns one and calls it from its own
/// Dispatch thread, never from the cooperative pool.
public protocol JobQueue: AnyObject {
    /// Moves the next job into this lane's processing list, waiting at most `timeout`.
    func reserve(timeout: Duration) throws -> ReservedJob?
    /// Acknowledges a finished job (after the store committed), publishing `result` for a waiting API request.
    func acknowledge(_ job: ReservedJob, result: [UInt8]?) throws
    /// Moves a job from processing to the retry set, to run again at `runAt`.
    func scheduleRetry(_ job: ReservedJob, updated: JobEnvelope, runAt: Date) throws
    /// Moves a job from processing to the dead letters.
    func bury(_ job: ReservedJob, updated: JobEnvelope?, at: Date) throws
    /// Refreshes this lane's liveness, so the janitor leaves its processing list alone.
    func heartbeat(busy: Int) throws
}

/// What the worker writes to Postgres after Apple answered.
public struct ValidationRecord: Sendable, Equatable {
    public var envelope: JobEnvelope
    public var status: ValidationStatus
    /// `production`/`sandbox` from Apple's answer.
    public var environment: String?
    public var appleStatus: Int?
    public var purchases: [InAppPurchase]
    public var latestReceipt: String?
    /// This attempt's calls to Apple.
    public var calls: [AppleCall]
    public var validatedAt: Date

    /// Creates a record.
    public init(
        envelope: JobEnvelope, status: ValidationStatus, environment: String?, appleStatus: Int?,
        purchases: [InAppPurchase], latestReceipt: String?, calls: [AppleCall], validatedAt: Date
    ) {
        self.envelope = envelope
        self.status = status
        self.environment = environment
        self.appleStatus = appleStatus
        self.purchases = purchases
        self.latestReceipt = latestReceipt
        self.calls = calls
        self.validatedAt = validatedAt
    }
}

/// Durable storage of validation results, for one worker lane (blocking, like `JobQueue`).
public protocol ReceiptStore: AnyObject {
    /// The app a job belongs to.
    func app(id: UUID) throws -> AppRecord?
    /// Stores a result in one transaction, idempotently (replaying the same job changes nothing),
    /// and returns the receipt resource as the API shows it.
    func save(_ record: ValidationRecord) throws -> ReceiptResource
}

/// Calls Apple (or the mock) for one receipt, following the environment rules. Never throws:
/// transport failures are part of the report.
public protocol ReceiptVerifier: AnyObject {
    /// Validates one receipt.
    func verify(_ request: VerificationRequest) -> VerificationReport
}

/// The Redis side of the ingestion API (async: it runs in Hummingbird's handlers).
public protocol ReceiptIntake: Sendable {
    /// Stores the pending resource and queues the job durably; returns only once Redis has both.
    func enqueue(_ envelope: JobEnvelope, pending: ReceiptResource) async throws
    /// Waits up to `timeout` for the worker's published resource.
    func awaitResult(id: UUID, timeout: Duration) async throws -> ReceiptResource?
    /// The pending resource of a job not yet stored in Postgres.
    func pendingResource(id: UUID) async throws -> ReceiptResource?
    /// Whether Redis answers (readiness).
    func ping() async -> Bool
}

/// The Postgres read side of the ingestion API.
public protocol ReceiptCatalog: Sendable {
    /// The app an API token belongs to, or nil (unknown or revoked token).
    func authenticate(token: String) async throws -> AppRecord?
    /// A stored receipt of `appID`.
    func receipt(id: UUID, appID: UUID) async throws -> ReceiptResource?
}

/// The scheduler's queue chores (blocking; the scheduler owns one and calls it from its own thread).
public protocol QueueMaintenance: AnyObject {
    /// Moves retries whose time has come back to their queue; returns how many.
    func promoteDueRetries(now: Date, limit: Int) throws -> Int
    /// Gives the jobs of workers whose heartbeat lapsed back to the queue; returns how many.
    func requeueOrphans() throws -> Int
}
