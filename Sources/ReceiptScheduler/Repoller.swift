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
public struct Repoller {
    /// The most subscriptions one claim takes (one transaction, one Redis script).
    public var batchSize: Int
    /// How long after a claim the subscription is polled again if its job never reports back.
    public var lease: Duration
    private let schedule: any SubscriptionSchedule
    private let queue: any RepollQueue

    /// Creates the step.
    /// - Parameters:
    ///   - schedule: the Postgres side.
    ///   - queue: the Redis side (budget and queue).
    ///   - batchSize: subscriptions per claim.
    ///   - lease: the fallback poll delay; longer than a job can spend retrying.
    public init(schedule: any SubscriptionSchedule, queue: any RepollQueue, batchSize: Int, lease: Duration) {
        self.schedule = schedule
        self.queue = queue
        self.batchSize = max(1, batchSize)
        self.lease = lease
    }

    /// Claims and queues one batch of due subscriptions.
    /// - Returns: how many were queued; fewer than `batchSize` when fewer were due or the budget ran out.
    public func runBatch(now: Date, using generator: inout some RandomNumberGenerator) throws -> Int {
        try schedule.claimDue(now: now, limit: batchSize, lease: now.addingTimeInterval(lease.seconds)) { due in
            let granted = try queue.acquire(due.count, now: now)
            guard granted > 0 else { return 0 }
            // Ids only for the jobs queued: most ticks find nothing due.
            let jobs = due.prefix(granted).map { $0.job(id: JobID.make(at: now, using: &generator), at: now) }
            _ = try queue.enqueue(jobs)
            return granted
        }
    }

    /// Claims batches until nothing more is due, the budget runs out, or `limit` were queued.
    /// - Returns: how many were queued.
    public func drain(now: Date, limit: Int, using generator: inout some RandomNumberGenerator) throws -> Int {
        var total = 0
        while total < limit {
            let queued = try runBatch(now: now, using: &generator)
            total += queued
            if queued < batchSize { break }
        }
        return total
    }

    /// How many subscriptions are due and not yet queued (the backlog the rate budget holds back),
    /// counting at most `limit`.
    public func countDue(now: Date, limit: Int = 1_000_000) throws -> Int {
        try schedule.countDue(now: now, limit: limit)
    }
}
