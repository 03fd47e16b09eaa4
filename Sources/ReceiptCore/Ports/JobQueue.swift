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
