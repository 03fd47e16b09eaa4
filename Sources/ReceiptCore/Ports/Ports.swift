import Foundation

/// A registered app: its bundle id and the shared secret it validates with.
public struct AppRecord: Sendable, Equatable, CustomStringConvertible {
    public var id: UUID
    public var name: String
    /// The app's main bundle id.
    public var bundleID: String
    /// Every bundle id whose receipts belong to this app (the main one first): an app family such as
    /// an iOS app and its macOS or older editions, sharing purchases.
    public var bundleIDs: [String]
    /// Apple's app-specific shared secret (`password`). Secret: never logged or shown.
    public var sharedSecret: String?
    public var excludeOldTransactions: Bool
    /// How its receipts are validated (`auto` unless an operator chose).
    public var backend: ValidationBackend
    /// Set once `auto` found `verifyReceipt` gone and moved the app to the Server API.
    public var switchedToServerAPIAt: Date?
    /// The In-App Purchase key for the Server API, decrypted. Secret: never logged or shown.
    public var serverAPIKey: ServerAPIKey?
    /// The key's id whenever one is registered, even when it could not be decrypted (then
    /// `serverAPIKey` is nil: the deployment's `RECEIPTQ_SECRETS_KEY` is wrong or missing).
    public var serverAPIKeyID: String?
    /// Apple's numeric app id, when known (checked against signed payloads' `appAppleId`).
    public var appAppleID: Int64?
    /// What happens to sandbox purchases in production.
    public var sandboxPolicy: SandboxPolicy
    /// Whether `identifier_for_vendor` is checked against the receipt's device hash.
    public var checksDevice: Bool

    /// Creates an app record.
    public init(
        id: UUID, name: String, bundleID: String, otherBundleIDs: [String] = [], sharedSecret: String?,
        excludeOldTransactions: Bool = false, backend: ValidationBackend = .auto, switchedToServerAPIAt: Date? = nil,
        serverAPIKey: ServerAPIKey? = nil, appAppleID: Int64? = nil, sandboxPolicy: SandboxPolicy = .accept, checksDevice: Bool = true
    ) {
        self.backend = backend
        self.switchedToServerAPIAt = switchedToServerAPIAt
        self.serverAPIKey = serverAPIKey
        self.serverAPIKeyID = serverAPIKey?.keyID
        self.appAppleID = appAppleID
        self.sandboxPolicy = sandboxPolicy
        self.checksDevice = checksDevice
        self.id = id
        self.name = name
        self.bundleID = bundleID
        self.bundleIDs = [bundleID] + otherBundleIDs.filter { $0 != bundleID }
        self.sharedSecret = sharedSecret
        self.excludeOldTransactions = excludeOldTransactions
    }

    /// The backend a receipt job of this app uses now: `auto` means the Server API once
    /// `verifyReceipt` is gone for it (and it has a key), `verifyReceipt` until then.
    public var effectiveBackend: ValidationBackend {
        switch backend {
        case .verifyReceipt: .verifyReceipt
        case .serverAPI: .serverAPI
        case .auto: switchedToServerAPIAt != nil && serverAPIKey != nil ? .serverAPI : .verifyReceipt
        }
    }

    /// Whether a receipt of `bundleID` belongs to this app.
    public func owns(bundleID: String?) -> Bool {
        guard let bundleID else { return false }
        return bundleIDs.contains(bundleID)
    }

    public var description: String {
        "AppRecord(id: \(id), name: \(name), bundleID: \(bundleID), sharedSecret: \(sharedSecret == nil ? "none" : "<redacted>"), backend: \(backend.rawValue), serverAPIKey: \(serverAPIKey == nil ? "none" : "<redacted>"))"
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

/// How a reserved job leaves the worker's processing list: each is one atomic move in Redis.
public enum Settlement: Sendable, Equatable {
    /// Done (stored in Postgres, or nothing to store): drop it, publishing `result` for a waiting API request.
    case acknowledge(ReservedJob, result: [UInt8]?)
    /// Back to the retry set, to run again at `runAt`.
    case retry(ReservedJob, updated: JobEnvelope, runAt: Date)
    /// To the dead letters, with its failure history (`updated`), or as it was when unreadable.
    case bury(ReservedJob, updated: JobEnvelope?, at: Date)

    /// The job being settled.
    public var job: ReservedJob {
        switch self {
        case .acknowledge(let job, _), .retry(let job, _, _), .bury(let job, _, _): job
        }
    }
}

/// The queue as one worker process sees it: reliable fetch into the process's own processing list,
/// in batches. Blocking: the worker calls it from its own Dispatch threads, never from the
/// cooperative pool. One instance per thread; instances of one process share its processing list.
public protocol JobQueue: AnyObject {
    /// Moves up to `max` jobs into the processing list, waiting at most `timeout` for the first
    /// (`.zero`: not at all).
    /// - Returns: the jobs, oldest first; empty when none arrived in time.
    func reserve(max: Int, timeout: Duration) throws -> [ReservedJob]
    /// As ``reserve(max:timeout:)``, and up to `background` jobs of the import queue in what the
    /// live queues leave of `max` (none while they fill it).
    func reserve(max: Int, background: Int, timeout: Duration) throws -> [ReservedJob]
    /// Settles finished jobs (after the store committed), each move atomic; safe to repeat after a
    /// failure whose outcome is unknown (a repeated move finds nothing left to move).
    ///
    /// `activity` is what the batch adds to the current minute's counters, written in the same
    /// transaction as the moves so that counting costs no round trip. Unlike the moves, the counts
    /// are not idempotent: a repeat after an unknown outcome may count the batch twice. The counters
    /// are approximate by design (a dashboard chart), so that is accepted.
    /// - Parameters:
    ///   - settlements: the jobs and where each goes.
    ///   - activity: the batch's outcomes and failure classes (empty: count nothing).
    func settle(_ settlements: [Settlement], activity: ActivityTally) throws
    /// Gives back to the queue every job in the processing list that is not in `inFlight`: jobs
    /// a lost reply left there. Returns how many.
    @discardableResult
    func requeueStrays(keeping inFlight: [[UInt8]]) throws -> Int
    /// Refreshes the process's liveness, so the janitor leaves its processing list alone.
    func heartbeat(busy: Int) throws
}

extension JobQueue {
    /// Queues without an import lane serve the live queues only.
    public func reserve(max: Int, background: Int, timeout: Duration) throws -> [ReservedJob] {
        try reserve(max: max, timeout: timeout)
    }
}

extension JobQueue {
    /// Settles finished jobs without counting them in the activity (tools and tests that move jobs
    /// by hand have nothing to report to the dashboard).
    /// - Parameter settlements: the jobs and where each goes.
    public func settle(_ settlements: [Settlement]) throws { try settle(settlements, activity: ActivityTally()) }
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
    /// Which Apple API produced the result (nil: none was asked, as for fraud or a failed job).
    public var validatedBy: ValidationBackend?
    /// Storing this result also records that its `auto` app moved to the Server API.
    public var switchesApp: Bool = false
    /// The auto-renewable subscriptions Apple's answer shows, each with its next re-poll.
    public var subscriptions: [PlannedSubscription]
    /// For a failed `repoll` job: when to try the subscription again (the dead letter keeps the job).
    public var retryPollAt: Date?
    /// Why the result is not valid (`apple_21002`, …): nil for a valid result, whatever earlier
    /// attempts failed with (the attempts table keeps that history). Nil for other statuses means
    /// the envelope's last error code.
    public var errorCode: FailureCode?
    /// For a `notification` job: the notification (its effect is in `purchases` and `subscriptions`).
    public var notification: AppleNotification?
    /// The stored receipt a notification's changes are filed under, when the store found one that
    /// already holds its subscription or purchase (nil: the notification's own row).
    public var filedUnder: UUID?
    /// For a `webhook` job: how its delivery went (nothing else of the record is stored).
    public var delivery: DeliveryOutcome?
    /// The user the ledger rows are filed for: the job's, or for a notification the user of the
    /// stored receipt that holds its subscription (set by the store).
    public var userIdentifier: String?
    /// For a `notification` job: the transaction it states.
    public var notificationTransactionID: String?

    /// Creates a record.
    public init(
        envelope: JobEnvelope, status: ValidationStatus, environment: String?, appleStatus: Int?,
        purchases: [InAppPurchase], latestReceipt: String?, calls: [AppleCall], validatedAt: Date,
        subscriptions: [PlannedSubscription] = [], retryPollAt: Date? = nil, errorCode: FailureCode? = nil,
        validatedBy: ValidationBackend? = nil
    ) {
        self.validatedBy = validatedBy
        self.errorCode = errorCode
        self.envelope = envelope
        self.status = status
        self.environment = environment
        self.appleStatus = appleStatus
        self.purchases = purchases
        self.latestReceipt = latestReceipt
        self.calls = calls
        self.validatedAt = validatedAt
        self.subscriptions = subscriptions
        self.retryPollAt = retryPollAt
        self.userIdentifier = envelope.payload.userIdentifier
    }
}

/// A subscription state to store, with when the scheduler should poll it next (nil: never).
public struct PlannedSubscription: Sendable, Equatable {
    public var state: SubscriptionState
    public var nextPollAt: Date?

    /// Creates a planned subscription.
    public init(state: SubscriptionState, nextPollAt: Date?) {
        self.state = state
        self.nextPollAt = nextPollAt
    }
}

/// Durable storage of validation results (blocking, like `JobQueue`; one instance per thread).
public protocol ReceiptStore: AnyObject {
    /// The app a job belongs to.
    func app(id: UUID) throws -> AppRecord?
    /// Stores results in one transaction where it can (group commit), idempotently (replaying the
    /// same job changes nothing), and returns each receipt resource as the API shows it, in order
    /// (nil for a `repoll` job, which updates subscriptions rather than a receipt of its own).
    /// - Returns: one result per record: a record the database refuses (say, its app was deleted)
    ///   fails alone, without failing the others.
    /// - Throws: when the database is unreachable: nothing of the batch is known to be stored.
    func save(_ records: [ValidationRecord]) throws -> [Result<ReceiptResource?, StoreFailure>]
    /// The webhook endpoint a delivery job sends to, or nil when it was removed.
    func webhookEndpoint(id: UUID) throws -> WebhookEndpointRecord?
}

extension ReceiptStore {
    /// Stores without webhooks (test doubles) know no endpoint.
    public func webhookEndpoint(id: UUID) throws -> WebhookEndpointRecord? { nil }
}

/// Why one record of a batch could not be stored, or a lookup could not be answered (bounded code;
/// never receipt data).
///
/// A *permanent* failure is the database refusing the value itself (a Postgres data exception,
/// SQLSTATE class 22, or a constraint violation, class 23): the same record fails the same way
/// forever, so a worker buries the job at once instead of asking Apple again, and a read answers
/// 422 or 404 instead of "retry later". Anything else (the connection) may pass.
public struct StoreFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What failed, in a closed set; a database's own verdict keeps its standard code.
    public enum Code: Sendable, Equatable, CustomStringConvertible {
        /// No connection to the database.
        case unavailable
        /// The write committed but its row could not be read back.
        case missingAfterWrite
        /// The database refused the statement: its SQLSTATE (`23503`, `22021`, …).
        case sqlState(String)
        /// The driver failed before the database gave a SQLSTATE (its failure's name).
        case driver(String)

        public var description: String {
            switch self {
            case .unavailable: "store_unavailable"
            case .missingAfterWrite: "missing_after_write"
            case .sqlState(let state): state
            case .driver(let name): name
            }
        }
    }

    /// What failed.
    public var code: Code
    /// A short description without receipt data or secrets.
    public var message: String
    /// True when retrying the same work cannot succeed.
    public var isPermanent: Bool

    /// Creates a failure.
    public init(code: Code, message: String, isPermanent: Bool = false) {
        self.code = code
        self.message = message
        self.isPermanent = isPermanent
    }

    public var description: String { "StoreFailure.\(code): \(message)" }
}

/// Calls Apple (or the mock) for one receipt, following the environment rules. Asynchronous so that
/// thousands of calls can be in flight on one thread. Never fails: transport failures are part of
/// the report.
public protocol ReceiptVerifier: Sendable {
    /// Validates one receipt and calls `completion` exactly once, on any thread. `completion` must
    /// return quickly (it may run on the HTTP engine's only thread).
    func verify(_ request: VerificationRequest, completion: @escaping @Sendable (VerificationReport) -> Void)
}

extension ReceiptVerifier {
    /// Validates one receipt, suspending until the report arrives.
    public func verify(_ request: VerificationRequest) async -> VerificationReport {
        await withCheckedContinuation { continuation in
            verify(request) { continuation.resume(returning: $0) }
        }
    }
}

/// How an enqueue ended.
public enum IntakeResult: Sendable, Equatable {
    /// Queued, and the worker's resource arrived within the wait.
    case answered(ReceiptResource)
    /// Durably queued; the worker has not stored it within the wait (or said it will retry).
    case queued
    /// The same receipt of the same app was queued within the idempotency window, under this id:
    /// nothing new was queued.
    case duplicate(UUID)
}

/// The Redis side of the ingestion API (async: it runs in Hummingbird's handlers).
public protocol ReceiptIntake: Sendable {
    /// Stores the pending resource (if any: a notification has none to show) and queues the job
    /// durably, unless `idempotencyKey` was queued within the window; returns only once Redis has
    /// both, after waiting up to `wait` for the worker's answer.
    /// - Throws: when Redis did not take the job (nothing is stored: the client may retry).
    func enqueue(
        _ envelope: JobEnvelope, pending: ReceiptResource?, idempotencyKey: String, wait: Duration
    ) async throws
        -> IntakeResult
    /// The pending resource of a job not yet stored in Postgres.
    func pendingResource(id: UUID) async throws -> ReceiptResource?
    /// Whether Redis answers (readiness).
    func ping() async -> Bool
    /// Adds one answered batch of the import `id` to its progress (``ImportRun``), best effort:
    /// progress is a view, so a failure here never fails the batch whose jobs Redis already has.
    func recordImport(_ id: UUID, appID: UUID, tally: ImportBatchTally, at: Date) async
}

extension ReceiptIntake {
    /// Intakes without imports' progress (test doubles) record nothing.
    public func recordImport(_ id: UUID, appID: UUID, tally: ImportBatchTally, at: Date) async {}
}

/// Checks locally that Apple signed a receipt: the ingestion API's 402 (possible fraud).
public protocol ReceiptAuthenticity: Sendable {
    /// Nil when Apple (or a certificate the operator trusts) signed exactly these bytes; otherwise
    /// a bounded reason such as `signature_mismatch` or `untrusted_chain`.
    func fraudReason(bytes: [UInt8], receipt: AppReceipt) -> String?
}

/// The Postgres read side of the ingestion API.
public protocol ReceiptCatalog: Sendable {
    /// The app an API token belongs to, or nil (unknown or revoked token).
    func authenticate(token: String) async throws -> AppRecord?
    /// A stored receipt of `appID`.
    func receipt(id: UUID, appID: UUID) async throws -> ReceiptResource?
    /// The Cloud Softphone web service credentials registered under `username`, with their app, or
    /// nil (unknown username).
    func softphoneCredentials(username: String) async throws -> SoftphoneCredentials?
    /// The app whose notification URL is `/apple/notifications/{name}/{token}`, or nil (unknown
    /// name, no URL issued, or another token).
    func notificationApp(name: String, token: String) async throws -> AppRecord?
}

extension ReceiptCatalog {
    /// Catalogs without notifications (test doubles) know no notification URL.
    public func notificationApp(name: String, token: String) async throws -> AppRecord? { nil }
}

/// The scheduler's queue chores (blocking; the scheduler owns one and calls it from its own thread).
public protocol QueueMaintenance: AnyObject {
    /// Moves retries whose time has come back to their queue; returns how many.
    func promoteDueRetries(now: Date, limit: Int) throws -> Int
    /// Gives the jobs of workers whose heartbeat lapsed back to the queue; returns how many.
    func requeueOrphans() throws -> Int
}

extension ValidationRecord {
    /// The error code the receipt row keeps: none once valid (an earlier `21008` must not linger on
    /// a valid row), else this result's own code, else the envelope's last failure.
    public var storedErrorCode: String? {
        switch status {
        case .valid: nil
        case .fraud: envelope.payload.purchase?.fraudReason
        default: (errorCode ?? envelope.errorCode)?.rawValue
        }
    }

    /// The subscription this record re-polled, if it is a re-poll.
    public var repollTarget: RepollTarget? {
        guard case .repoll(let job) = envelope.payload else { return nil }
        return job.target
    }

    /// Whether this is a re-poll of a subscription (no receipt row of its own).
    public var isRepoll: Bool { repollTarget != nil }

    /// Whether this applies an App Store Server Notification (nobody waits for its resource).
    public var isNotification: Bool { notification != nil }

    /// The stored receipt this record's purchases and calls are filed under: its own, for a re-poll
    /// the receipt it re-sent, for a notification the receipt that already holds its subscription.
    public var receiptID: UUID { filedUnder ?? repollTarget?.receiptID ?? envelope.id }
}

/// A subscription whose re-poll is due, as the scheduler claims it: what a `repoll` job needs.
public struct DueSubscription: Sendable, Equatable, CustomStringConvertible {
    public var appID: UUID
    public var environment: String
    public var originalTransactionID: String
    /// The poll counter before this poll: with the key, it names the job.
    public var pollSequence: Int
    /// The stored receipt whose latest receipt is re-sent.
    public var receiptID: UUID
    /// That latest receipt, base64. Secret: never logged.
    public var receipt: String
    public var style: ReceiptStyle?
    public var bundleID: String?
    public var userIdentifier: String?

    /// Creates a due subscription.
    public init(
        appID: UUID, environment: String, originalTransactionID: String, pollSequence: Int, receiptID: UUID, receipt: String,
        style: ReceiptStyle? = nil, bundleID: String? = nil, userIdentifier: String? = nil
    ) {
        self.appID = appID
        self.environment = environment
        self.originalTransactionID = originalTransactionID
        self.pollSequence = pollSequence
        self.receiptID = receiptID
        self.receipt = receipt
        self.style = style
        self.bundleID = bundleID
        self.userIdentifier = userIdentifier
    }

    /// Without the receipt or the user, so a due subscription interpolated into a log line leaks nothing.
    public var description: String {
        "DueSubscription(app: \(appID), environment: \(environment), original_transaction_id: \(originalTransactionID), poll_seq: \(pollSequence))"
    }

    /// The `repoll` job for this poll.
    public func job(id: UUID, at date: Date) -> JobEnvelope {
        JobEnvelope(
            id: id, appID: appID, enqueuedAt: date, origin: .scheduler,
            payload: .repoll(
                RepollJob(
                    target: RepollTarget(originalTransactionID: originalTransactionID, receiptID: receiptID, pollSequence: pollSequence),
                    latestReceipt: receipt, style: style, bundleID: bundleID, environment: environment, userIdentifier: userIdentifier)))
    }
}

/// The Postgres side of the re-poll scheduler (blocking; the scheduler calls it from its own thread).
public protocol SubscriptionSchedule: AnyObject {
    /// In one transaction: locks up to `limit` subscriptions due at `now`, oldest first, skipping
    /// those another scheduler holds; passes them to `enqueue`; then moves the first `n` it returns
    /// to `lease` (a fallback poll, should the job vanish) and bumps their poll counter.
    /// - Returns: `n`.
    /// - Throws: what `enqueue` throws (nothing is advanced), or when Postgres fails.
    func claimDue(now: Date, limit: Int, lease: Date, enqueue: ([DueSubscription]) throws -> Int) throws -> Int

    /// How many subscriptions are due at `now` and not yet claimed, counting at most `limit` (so
    /// that a backlog of millions costs a bounded index scan).
    func countDue(now: Date, limit: Int) throws -> Int
}

/// The Redis side of the re-poll scheduler: a budget shared by every replica, and a queue that
/// takes each poll once.
public protocol RepollQueue: AnyObject {
    /// Takes up to `wanted` re-polls from the global rate budget at `now`; returns how many it may queue.
    func acquire(_ wanted: Int, now: Date) throws -> Int
    /// Queues each job unless a job for the same subscription and poll counter was queued before
    /// (a scheduler that died before its commit is repeated harmlessly); returns how many were new.
    func enqueue(_ jobs: [JobEnvelope]) throws -> Int
}
