import Foundation

/// Which job set a ``JobSetStore`` serves, and so what an entry's score means.
public enum JobSetKind: String, Sendable, Equatable, CaseIterable {
    /// The dead letters: jobs given up on; the score is when the job died.
    case dead
    /// Jobs waiting in backoff; the score is when the job runs again.
    case retry
}

/// One member of a job set (the dead letters or the retries), as the dashboard and `receiptq dlq`
/// show it.
///
/// ```swift
/// let page = try await deadLetters.list(filter: JobSetFilter(errorCode: .transport(.timeout)), offset: 0, limit: 50)
/// for entry in page.entries {
///     print(entry.id, entry.bundleID ?? "-", entry.errorCode?.rawValue ?? "-", entry.attempts)
/// }
/// ```
///
/// A member whose bytes are not a job envelope (a poison job) is still an entry: its `envelope`
/// is nil, its id is derived from a hash of its bytes, and it can be deleted like any other.
///
/// `raw` and `envelope.payload` hold the receipt itself: show ``envelopeForDisplay`` instead.
/// `description` never includes either.
public struct JobSetEntry: Sendable, Equatable, Identifiable, CustomStringConvertible {
    /// An entry's identifier: the job id, or `poison-<hash>` for a member that is not an envelope.
    ///
    /// Parsing is exact: a UUID in any letter case names that job and nothing else, never a
    /// prefix or a substring.
    public struct ID: Sendable, Hashable, CustomStringConvertible, LosslessStringConvertible {
        private static let poisonPrefix = "poison-"

        /// The canonical form: a lowercase UUID, or `poison-` and 32 lowercase hex digits.
        public let rawValue: String

        /// The identifier of a job.
        public init(job: UUID) { self.init(canonical: job.uuidString.lowercased()) }

        /// The identifier of a poison member: a 128-bit FNV-1a hash of its bytes, so the same bytes
        /// always get the same id and can be found again to delete them.
        public init(poison raw: [UInt8]) {
            let hex = String(Self.fnv1a128(raw), radix: 16)
            self.init(canonical: Self.poisonPrefix + String(repeating: "0", count: 32 - hex.count) + hex)
        }

        /// Parses an identifier as shown in the dashboard or passed to `receiptq dlq`.
        /// - Parameter text: a UUID in any letter case, or `poison-` and 32 hex digits.
        /// - Returns: nil for anything else (including a partial UUID).
        public init?(_ text: String) {
            let text = text.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
            if let uuid = UUID(uuidString: text) {
                self.init(job: uuid)
                return
            }
            let digits = text.dropFirst(Self.poisonPrefix.count)
            guard text.hasPrefix(Self.poisonPrefix), digits.count == 32, digits.allSatisfy(\.isHexDigit) else { return nil }
            self.init(canonical: text)
        }

        private init(canonical: String) { rawValue = canonical }

        /// The job id, or nil for a poison member.
        public var jobID: UUID? { UUID(uuidString: rawValue) }

        /// Whether this names a poison member.
        public var isPoison: Bool { rawValue.hasPrefix(Self.poisonPrefix) }

        /// The canonical form, ``rawValue``.
        public var description: String { rawValue }

        private static func fnv1a128(_ bytes: [UInt8]) -> UInt128 {
            // Not a security hash: poison members are our own workers' output, and the id only
            // has to tell a few thousand of them apart.
            var hash: UInt128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d
            let prime: UInt128 = 0x0000_0000_0100_0000_0000_0000_0000_013b
            for byte in bytes {
                hash ^= UInt128(byte)
                hash = hash &* prime
            }
            return hash
        }
    }

    /// The job id, or a hash-derived id for a poison member.
    public let id: ID
    /// The parsed envelope, or nil when the member is not a valid envelope (a poison job).
    public let envelope: JobEnvelope?
    /// The member's bytes exactly as stored, which delete and retry match on. Holds the receipt:
    /// never render or log it.
    public let raw: [UInt8]
    /// The member's score: when the job died (dead letters) or when it runs again (retries).
    public let score: Date

    /// Parses a member of a job set.
    /// - Parameters:
    ///   - raw: the member's bytes.
    ///   - score: its score as a date.
    public init(raw: [UInt8], score: Date) {
        let envelope = try? JobEnvelope.decode(raw)
        self.envelope = envelope
        self.id = envelope.map { ID(job: $0.id) } ?? ID(poison: raw)
        self.raw = raw
        self.score = score
    }

    /// Whether the member is not a valid envelope; such a member can be deleted but not retried.
    public var isPoison: Bool { envelope == nil }
    /// The job id (nil for a poison member).
    public var jobID: UUID? { envelope?.id }
    /// Which queue a retry sends the job to.
    public var kind: JobKind? { envelope?.kind }
    /// The registered app the receipt belongs to.
    public var appID: UUID? { envelope?.appID }
    /// The bundle id decoded from the receipt at ingestion.
    public var bundleID: String? { envelope?.payload.bundleID }
    /// The bounded code of the last failure.
    public var errorCode: FailureCode? { envelope?.errorCode }
    /// The redacted description of the last failure.
    public var errorMessage: String? { envelope?.errorMessage }
    /// How many attempts have failed so far (0 for a poison member).
    public var attempts: Int { envelope?.attempt ?? 0 }
    /// When the job first failed (since it was last queued by an operator).
    public var firstFailedAt: Date? { envelope?.firstFailedAt }
    /// When the job last failed.
    public var lastFailedAt: Date? { envelope?.lastFailedAt }
    /// When the receipt was queued at ingestion.
    public var enqueuedAt: Date? { envelope?.enqueuedAt }
    /// The end user's identifier the client sent along.
    public var userIdentifier: String? { envelope?.payload.userIdentifier }
    /// Who put the job on the queue last.
    public var origin: JobOrigin? { envelope?.origin }

    /// How long ago the receipt was queued (for a poison member: how long ago its score was).
    /// - Parameter now: the current time, from the injected clock.
    /// - Returns: zero or more.
    public func age(at now: Date) -> Duration {
        let since = enqueuedAt ?? score
        return .milliseconds(Int64(max(0, now.timeIntervalSince(since)) * 1000))
    }

    /// The envelope with the receipt replaced by a placeholder, for a detail page or `dlq show`.
    public var envelopeForDisplay: JobEnvelope? {
        guard var copy = envelope else { return nil }
        // The first twelve characters are the PKCS#7 header every receipt starts with: enough to
        // see it is one, nothing about whose it is.
        copy.payload = copy.payload.redacting { "<receipt: \($0.prefix(12))… \($0.utf8.count) base64 characters, the rest not shown>" }
        return copy
    }

    /// A log-safe summary: no receipt, no user data.
    public var description: String {
        "JobSetEntry(id: \(id), errorCode: \(errorCode?.rawValue ?? "none"), attempts: \(attempts), score: \(score), "
            + "poison: \(isPoison))"
    }
}

/// Which entries of a job set to list, retry or delete; every condition given must hold.
///
/// ```swift
/// let filter = JobSetFilter(errorCode: .sharedSecretMismatch, appID: app.id)
/// let moved = try await deadLetters.retryAll(matching: filter)
/// ```
///
/// The substring search looks only at the job id, bundle id, error code and message, and the
/// user identifier, case-insensitively; never at the receipt, so a search cannot probe receipt
/// contents. A poison member matches only an empty filter or a search for its `poison-…` id.
public struct JobSetFilter: Sendable, Equatable {
    /// The last failure's error code, matched exactly.
    public var errorCode: FailureCode?
    /// The app the job belongs to.
    public var appID: UUID?
    /// A case-insensitive substring of the id, bundle id, error code or message, user identifier or
    /// kind (`webhook`), or of a webhook delivery's endpoint id, event id or event type.
    public var search: String?

    /// Every entry.
    public static var all: JobSetFilter { JobSetFilter() }

    /// Creates a filter; empty or blank strings count as "any".
    /// - Parameters:
    ///   - errorCode: the exact failure, e.g. `.sharedSecretMismatch` (an operator's text: ``FailureCode/init(text:)``).
    ///   - appID: the app.
    ///   - search: a substring to look for.
    public init(errorCode: FailureCode? = nil, appID: UUID? = nil, search: String? = nil) {
        self.errorCode = errorCode
        self.appID = appID
        self.search = Self.nonBlank(search)
    }

    /// Whether the filter selects every entry.
    public var isEmpty: Bool { errorCode == nil && appID == nil && Self.nonBlank(search) == nil }

    /// Whether `entry` is selected.
    /// - Parameter entry: a member of a job set.
    /// - Returns: true when every condition given holds.
    public func matches(_ entry: JobSetEntry) -> Bool {
        if let errorCode, entry.errorCode != errorCode { return false }
        if let appID, entry.appID != appID { return false }
        guard let needle = Self.nonBlank(search)?.lowercased() else { return true }
        // Deliberately not the receipt, the raw bytes, the device or network fields. A webhook
        // delivery is found by its endpoint, its event or its event type.
        let webhook = entry.envelope?.payload.delivery?.target
        let haystacks = [
            entry.id.rawValue, entry.bundleID, entry.errorCode?.rawValue, entry.errorMessage, entry.userIdentifier, entry.kind?.rawValue,
            webhook?.endpointID.canonical, webhook?.eventID.canonical, webhook?.eventType,
        ]
        return haystacks.contains { $0?.lowercased().contains(needle) ?? false }
    }

    private static func nonBlank(_ text: String?) -> String? {
        guard let trimmed = text?.trimmingCharacters(in: .whitespacesAndNewlines), !trimmed.isEmpty else { return nil }
        return trimmed
    }
}

/// One page of a job set listing.
public struct JobSetPage: Sendable, Equatable {
    /// The entries of this page, in the set's listing order.
    public var entries: [JobSetEntry]
    /// How many entries match the filter in the whole set.
    public var totalMatching: Int
    /// The offset this page starts at, among the matching entries.
    public var offset: Int
    /// The page size asked for.
    public var limit: Int
    /// False when the store examined only part of a very large set for a filtered page, so
    /// `totalMatching` counts the matches among the members it examined (show it as "at least").
    public var totalIsExact: Bool

    /// Creates a page.
    /// - Parameters:
    ///   - entries: the entries.
    ///   - totalMatching: how many match in all.
    ///   - offset: where the page starts.
    ///   - limit: the page size.
    ///   - totalIsExact: whether the whole set was examined; default true.
    public init(entries: [JobSetEntry], totalMatching: Int, offset: Int, limit: Int, totalIsExact: Bool = true) {
        self.entries = entries
        self.totalMatching = totalMatching
        self.offset = offset
        self.limit = limit
        self.totalIsExact = totalIsExact
    }

    /// The offset of the next page, or nil on the last page.
    public var nextOffset: Int? { limit > 0 && offset + limit < totalMatching ? offset + limit : nil }
    /// The offset of the previous page, or nil on the first page.
    public var previousOffset: Int? { offset > 0 ? max(0, offset - limit) : nil }
}

/// The dead letters or the retries, as the dashboard and `receiptq dlq` manage them.
///
/// Retrying moves a job to its queue, atomically and at most once even when two operators retry
/// it at the same moment, with a fresh retry budget (see ``JobEnvelope/requeued(by:)``): jobs
/// retried by id go to the front, a bulk retry goes to the back so that it cannot starve fresh
/// jobs. A poison member cannot be retried, only deleted.
///
/// ```swift
/// let dead: any JobSetStore = RedisJobSet.dead(pool: pool, keys: keys)
/// if let id = JobSetEntry.ID(idFromURL), let entry = try await dead.entry(id: id) {
///     try await dead.retry(ids: [entry.id])
/// }
/// ```
public protocol JobSetStore: Sendable {
    /// Which set this is, and so what an entry's score means.
    var kind: JobSetKind { get }

    /// How many members the set holds.
    func count() async throws -> Int

    /// A page of the entries matching `filter`, in the set's listing order.
    /// - Parameters:
    ///   - filter: which entries.
    ///   - offset: how many matching entries to skip.
    ///   - limit: the most entries to return.
    /// - Returns: the page, with the number of matching entries.
    func list(filter: JobSetFilter, offset: Int, limit: Int) async throws -> JobSetPage

    /// The entry with this id (the newest one, should a job be in the set twice), or nil.
    func entry(id: JobSetEntry.ID) async throws -> JobSetEntry?

    /// Moves these jobs to the front of their queues (taken next: someone is waiting for them),
    /// with a fresh retry budget.
    /// - Parameter ids: the entries; unknown ids and poison members are skipped.
    /// - Returns: how many jobs were requeued.
    @discardableResult
    func retry(ids: [JobSetEntry.ID]) async throws -> Int

    /// Moves every job matching `filter` to the back of its queue, behind the jobs already
    /// queued (thousands of old jobs must not hold up fresh ones), with a fresh retry budget.
    /// - Parameter filter: which entries; poison members are skipped.
    /// - Returns: how many jobs were requeued.
    @discardableResult
    func retryAll(matching filter: JobSetFilter) async throws -> Int

    /// Removes these entries for good.
    /// - Parameter ids: the entries; unknown ids are skipped.
    /// - Returns: how many members were removed.
    @discardableResult
    func delete(ids: [JobSetEntry.ID]) async throws -> Int

    /// Removes every entry matching `filter` for good.
    /// - Parameter filter: which entries.
    /// - Returns: how many members were removed.
    @discardableResult
    func deleteAll(matching filter: JobSetFilter) async throws -> Int
}

extension JobEnvelope {
    /// The envelope an operator sends back to the queue.
    ///
    /// Keeps the history of Apple calls (the audit trail), but gives the job a fresh retry
    /// budget: `RetryPolicy` gives up by the age of `firstFailedAt` and backs off by `attempt`,
    /// so with either kept the requeued job would die again at its next failure, or wait the
    /// longest backoff before its first retry.
    /// - Parameter origin: who requeued it (`.dashboard` or `.cli`).
    /// - Returns: the updated envelope.
    public func requeued(by origin: JobOrigin) -> JobEnvelope {
        var copy = self
        copy.origin = origin
        copy.attempt = 0
        copy.firstFailedAt = nil
        copy.lastFailedAt = nil
        copy.errorCode = nil
        copy.errorMessage = nil
        return copy
    }
}

/// One live worker lane, from its heartbeat.
public struct WorkerStatus: Sendable, Equatable {
    public var id: String
    public var host: String?
    public var pid: Int?
    /// Jobs in flight in the lane's process at its last heartbeat.
    public var busy: Int?
    public var startedAt: Date?
    public var lastHeartbeatAt: Date?
    /// Jobs in the lane's processing list now.
    public var processing: Int

    /// Creates a status.
    public init(
        id: String, host: String?, pid: Int?, busy: Int?, startedAt: Date?, lastHeartbeatAt: Date?, processing: Int
    ) {
        self.id = id
        self.host = host
        self.pid = pid
        self.busy = busy
        self.startedAt = startedAt
        self.lastHeartbeatAt = lastHeartbeatAt
        self.processing = processing
    }
}

/// The queues at a glance: what the dashboard's overview and `/admin/api/overview` show.
public struct QueueSnapshot: Sendable, Equatable {
    /// Ready jobs per queue (`validate`, `repoll`).
    public var queued: [JobKind: Int]
    /// Bulk imports' validations waiting in the import queue (served with spare capacity only).
    public var importQueued: Int
    /// Bulk imports active in the last day, the most recent first (running ones and those just finished).
    public var imports: [ImportRun]
    public var retries: Int
    public var dead: Int
    /// Live worker lanes (their heartbeat has not lapsed).
    public var workers: [WorkerStatus]
    /// Apple outage mode, shared by every worker.
    public var circuit: CircuitSnapshot
    /// The last hour, one entry per minute, oldest first (minutes without jobs count zero).
    public var activity: [ActivityMinute]
    /// Where Apple's `verifyReceipt` stands: gone, or the deprecation and sunset it announced.
    public var verifyReceipt: VerifyReceiptLifecycle
    /// How the Redis primary's replicas keep up (no replicas: zeros).
    public var replication: ReplicationStatus

    /// Creates a snapshot.
    public init(
        queued: [JobKind: Int], retries: Int, dead: Int, workers: [WorkerStatus],
        circuit: CircuitSnapshot = CircuitSnapshot(status: .closed), activity: [ActivityMinute] = [],
        verifyReceipt: VerifyReceiptLifecycle = VerifyReceiptLifecycle(), importQueued: Int = 0, imports: [ImportRun] = [],
        replication: ReplicationStatus = ReplicationStatus()
    ) {
        self.replication = replication
        self.importQueued = importQueued
        self.imports = imports
        self.verifyReceipt = verifyReceipt
        self.queued = queued
        self.retries = retries
        self.dead = dead
        self.workers = workers
        self.circuit = circuit
        self.activity = activity
    }
}

/// The Redis primary's replicas as it reports them: what a failover now would lose, and whether
/// `REDIS_MIN_REPLICAS_ACK` can be met.
public struct ReplicationStatus: Sendable, Equatable {
    /// Replicas connected and online.
    public var replicas: Int
    /// The longest time since one of them acknowledged, in seconds (they do every second).
    public var lagSeconds: Int
    /// The most bytes of the replication stream one of them has not acknowledged.
    public var lagBytes: Int

    /// Creates a status.
    public init(replicas: Int = 0, lagSeconds: Int = 0, lagBytes: Int = 0) {
        self.replicas = replicas
        self.lagSeconds = lagSeconds
        self.lagBytes = lagBytes
    }
}

/// Reads a ``QueueSnapshot`` (async: the dashboard's handlers call it).
public protocol QueueOverview: Sendable {
    /// The queues, sets and live workers now.
    func snapshot() async throws -> QueueSnapshot
}
