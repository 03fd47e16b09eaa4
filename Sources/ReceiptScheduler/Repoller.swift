import Foundation
import ReceiptCore

/// One scheduler replica's re-poll step: claim due subscriptions in Postgres, take their share of
/// the global rate budget, queue one `repoll` job each, and advance them, in that order.
///
/// **Never twice.** Rows are claimed with `FOR UPDATE SKIP LOCKED` and advanced in the same
/// transaction, after Redis took the jobs; a replica that dies between the two leaves the rows at
/// the same poll counter, and the next claim's enqueue finds the counter's marker and queues
/// nothing new. A job that is lost or buried cannot stop the polling either: the claim moves the
/// row to a lease, a fallback poll after the retry budget is spent.
///
/// **Notifications.** A due subscription that Server Notifications V2 cover is skipped until its
/// safety net (``RepollSafetyNet``); the skip is written in the same transaction as the claim.
public struct Repoller {
    /// The most subscriptions one claim takes (one transaction, one Redis script).
    public var batchSize: Int
    /// How long after a claim the subscription is polled again if its job never reports back.
    public var lease: Duration
    /// Which due subscriptions notifications cover.
    public var safetyNet: RepollSafetyNet
    private let schedule: any SubscriptionSchedule
    private let queue: any RepollQueue

    /// Creates the step.
    /// - Parameters:
    ///   - schedule: the Postgres side.
    ///   - queue: the Redis side (budget and queue).
    ///   - batchSize: subscriptions per claim.
    ///   - lease: the fallback poll delay; longer than a job can spend retrying.
    ///   - safetyNet: which due subscriptions notifications cover (skipped until their safety net).
    public init(
        schedule: any SubscriptionSchedule, queue: any RepollQueue, batchSize: Int, lease: Duration, safetyNet: RepollSafetyNet
    ) {
        self.schedule = schedule
        self.queue = queue
        self.batchSize = max(1, batchSize)
        self.lease = lease
        self.safetyNet = safetyNet
    }

    /// Claims and queues one batch of due subscriptions (skipping those notifications cover).
    /// - Parameters:
    ///   - now: the subscriptions' clock (the one their polls were planned on): what is due, the lease.
    ///   - queuedAt: the queue's clock (the machine's): the jobs' ids and enqueue time, the rate
    ///     budget's seconds (nil: `now`, the same clock, as in production).
    /// - Returns: what was claimed, queued and skipped; fewer queued than due when the budget ran out.
    public func runBatch(now: Date, queuedAt: Date? = nil, using generator: inout some RandomNumberGenerator) throws -> RepollClaim {
        let queuedAt = queuedAt ?? now
        return try schedule.claimDue(now: now, limit: batchSize, lease: now.addingTimeInterval(lease.seconds), safetyNet: safetyNet) { due in
            let granted = try queue.acquire(due.count, now: queuedAt)
            guard granted > 0 else { return 0 }
            // Ids only for the jobs queued: most ticks find nothing due.
            let jobs = due.prefix(granted).map { $0.job(id: JobID.make(at: queuedAt, using: &generator), at: queuedAt) }
            _ = try queue.enqueue(jobs)
            return granted
        }
    }

    /// Claims batches until nothing more is due, the budget runs out, or `limit` were queued.
    /// - Parameters: `now` and `queuedAt` as ``runBatch(now:queuedAt:using:)`` takes them.
    /// - Returns: the re-polls made and skipped, per app.
    public func drain(
        now: Date, queuedAt: Date? = nil, limit: Int, using generator: inout some RandomNumberGenerator
    ) throws -> RepollTally {
        var tally = RepollTally()
        while tally.queued < limit {
            let claim = try runBatch(now: now, queuedAt: queuedAt, using: &generator)
            tally.add(claim)
            // A short batch: nothing more is due. Every row polled or skipped but some not queued: the budget ran out.
            if claim.claimed < batchSize || claim.queued.count + claim.skippedApps.count < claim.claimed { break }
        }
        return tally
    }

    /// How many subscriptions are due and not yet queued (the backlog the rate budget holds back),
    /// counting at most `limit`.
    public func countDue(now: Date, limit: Int = 1_000_000) throws -> Int {
        try schedule.countDue(now: now, limit: limit)
    }
}

/// The re-polls one drain made and skipped, per app (`receiptq_repolls_total`).
public struct RepollTally: Sendable, Equatable {
    /// Re-poll jobs queued, per app.
    public var made: [UUID: Int] = [:]
    /// Due re-polls skipped because notifications cover the subscription, per app.
    public var skipped: [UUID: Int] = [:]

    /// An empty tally.
    public init() {}

    /// Every re-poll job queued.
    public var queued: Int { made.values.reduce(0, +) }

    /// Adds one claim's counts.
    public mutating func add(_ claim: RepollClaim) {
        for due in claim.queued { made[due.appID, default: 0] += 1 }
        for app in claim.skippedApps { skipped[app, default: 0] += 1 }
    }
}
