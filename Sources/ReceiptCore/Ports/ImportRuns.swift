import Foundation

/// One bulk import as operators follow it: what its batches queued (from the ingestion nodes)
/// and what the workers made of those jobs. Counters, not a ledger: a batch repeated after a lost
/// answer counts its items again as duplicates, and a settlement repeated after a Redis hiccup may
/// count twice, so the numbers are progress, never proof (Postgres is the proof).
public struct ImportRun: Sendable, Equatable {
    /// The import (`Receiptq-Import-Id`).
    public var id: UUID
    /// The app whose token sent its batches (nil when only workers have reported so far).
    public var appID: UUID?
    /// Its first batch.
    public var startedAt: Date?
    /// Its last batch or settlement.
    public var updatedAt: Date?
    /// Items queued as new jobs (forgeries included: a worker stores them as fraud).
    public var queued: Int
    /// Items that were already queued or stored (within the idempotency window or the same batch).
    public var duplicates: Int
    /// Items refused at the door (422): the importer's rejects file has their lines.
    public var invalid: Int
    /// Jobs a worker stored in Postgres (valid, invalid or fraud).
    public var stored: Int
    /// Jobs that went to the dead letters.
    public var failed: Int
    /// The first and the last job stored: the rate is measured between them.
    public var firstStoredAt: Date?
    public var lastStoredAt: Date?

    /// Creates a run's view.
    public init(
        id: UUID, appID: UUID? = nil, startedAt: Date? = nil, updatedAt: Date? = nil, queued: Int = 0, duplicates: Int = 0, invalid: Int = 0,
        stored: Int = 0, failed: Int = 0, firstStoredAt: Date? = nil, lastStoredAt: Date? = nil
    ) {
        self.id = id
        self.appID = appID
        self.startedAt = startedAt
        self.updatedAt = updatedAt
        self.queued = queued
        self.duplicates = duplicates
        self.invalid = invalid
        self.stored = stored
        self.failed = failed
        self.firstStoredAt = firstStoredAt
        self.lastStoredAt = lastStoredAt
    }

    /// Jobs queued and not yet stored or buried.
    public var remaining: Int { max(0, queued - stored - failed) }

    /// Whether jobs of this import are still waiting for a worker.
    public var isRunning: Bool { remaining > 0 }

    /// Jobs stored per second, between the first and the last (nil before two seconds of it).
    public var ratePerSecond: Double? {
        guard let first = firstStoredAt, let last = lastStoredAt, last.timeIntervalSince(first) >= 2, stored > 1 else { return nil }
        return Double(stored - 1) / last.timeIntervalSince(first)
    }

    /// When the remaining jobs should be done at the measured rate (nil: finished, or no rate yet).
    public func estimatedEnd(now: Date) -> Date? {
        guard isRunning, let rate = ratePerSecond, rate > 0 else { return nil }
        return now.addingTimeInterval(Double(remaining) / rate)
    }
}

/// What one batch of an import added, as the ingestion node counts it.
public struct ImportBatchTally: Sendable, Equatable {
    public var queued = 0
    public var duplicates = 0
    public var invalid = 0

    /// Creates a tally.
    public init(queued: Int = 0, duplicates: Int = 0, invalid: Int = 0) {
        self.queued = queued
        self.duplicates = duplicates
        self.invalid = invalid
    }
}

/// A per-app budget of bulk imports' validations, each one or two calls to Apple
/// (`IMPORT_RATE_PER_SECOND`), shared by every worker process, apart from live traffic's: a backfill never spends what the app's live
/// purchases need, and never makes Apple rate-limit the app.
///
/// Blocking, like the queue: one instance per thread.
public protocol ImportRateBudget: AnyObject {
    /// Takes one call for `app` (its bundle id) at `ratePerSecond`, or books one of the next
    /// `bookingAhead` seconds' tokens, or says when to ask again; an app Apple paused (429) waits too.
    func reserveImport(app: String, ratePerSecond: Double, now: Date, bookingAhead: TimeInterval) throws -> ServerAPISlot
}
