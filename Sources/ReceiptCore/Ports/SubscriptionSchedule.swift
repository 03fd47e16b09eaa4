import Foundation

/// The Postgres side of the re-poll scheduler (blocking; the scheduler calls it from its own thread).
public protocol SubscriptionSchedule: AnyObject {
    /// In one transaction: locks up to `limit` subscriptions due at `now`, oldest first, skipping
    /// those another scheduler holds; moves the ones `safetyNet` skips to their safety-net time
    /// (remembering the poll they skipped, should their app's notifications stop); passes the others
    /// to `enqueue`; then moves the first `n` it returns to `lease` (a fallback poll, should the job
    /// vanish) and bumps their poll counter.
    ///
    /// First, in the same transaction, the subscriptions skipped for an app whose notifications
    /// stopped arriving get back the poll they skipped (today's schedule: due, if it has passed).
    /// - Returns: what was claimed, skipped and queued.
    /// - Throws: what `enqueue` throws (nothing is advanced or skipped), or when Postgres fails.
    func claimDue(
        now: Date, limit: Int, lease: Date, safetyNet: RepollSafetyNet, enqueue: ([DueSubscription]) throws -> Int
    ) throws -> RepollClaim

    /// How many subscriptions are due at `now` and not yet claimed, counting at most `limit` (so
    /// that a backlog of millions costs a bounded index scan).
    func countDue(now: Date, limit: Int) throws -> Int
}

/// What one claim of due subscriptions did.
public struct RepollClaim: Sendable, Equatable {
    /// The due rows it locked (when fewer than the limit, nothing more was due).
    public var claimed: Int
    /// The subscriptions queued (a prefix of those passed to `enqueue`), in claim order.
    public var queued: [DueSubscription]
    /// The apps of the subscriptions skipped because notifications cover them, one entry each.
    public var skippedApps: [UUID]

    /// Creates a claim's summary.
    public init(claimed: Int = 0, queued: [DueSubscription] = [], skippedApps: [UUID] = []) {
        self.claimed = claimed
        self.queued = queued
        self.skippedApps = skippedApps
    }
}
