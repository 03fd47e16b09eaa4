import Foundation

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
    /// Puts the processing list right: every job in it that is not in `inFlight` (a stray) is
    /// settled as `settledAgain` says when it knows the job (the process settled it, and the
    /// server that took that settle lost it in a failover: acknowledged again, its pending key
    /// removed, not validated twice), and otherwise given back to its queue (a lost reserve reply).
    ///
    /// `inFlight` must be read before the call: a job settled meanwhile is then still kept.
    /// - Parameters:
    ///   - inFlight: the jobs the process holds (reserved, running, or waiting for a commit).
    ///   - settledAgain: the settlement the process already made of a job, if any.
    /// - Returns: how many strays were settled again and how many given back.
    @discardableResult
    func reconcile(keeping inFlight: [[UInt8]], settledAgain: (ReservedJob) -> Settlement?) throws -> Reconciliation
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

extension JobQueue {
    /// Gives back to the queue every job in the processing list that is not in `inFlight` (what a
    /// lost reply left there), settling none: ``reconcile(keeping:settledAgain:)`` knowing no
    /// settlement. Returns how many.
    @discardableResult
    public func requeueStrays(keeping inFlight: [[UInt8]]) throws -> Int {
        try reconcile(keeping: inFlight) { _ in nil }.requeued
    }
}

/// What a ``JobQueue/reconcile(keeping:settledAgain:)`` did with the strays it found.
public struct Reconciliation: Sendable, Equatable {
    /// Strays the process had settled already, settled again.
    public var resettled: Int
    /// Strays given back to their queue.
    public var requeued: Int

    /// Creates a tally.
    public init(resettled: Int = 0, requeued: Int = 0) {
        self.resettled = resettled
        self.requeued = requeued
    }
}
