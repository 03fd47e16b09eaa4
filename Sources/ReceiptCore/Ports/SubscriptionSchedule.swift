import Foundation

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
