import Foundation

/// The scheduler's queue chores (blocking; the scheduler owns one and calls it from its own thread).
public protocol QueueMaintenance: AnyObject {
    /// Moves retries whose time has come back to their queue; returns how many.
    func promoteDueRetries(now: Date, limit: Int) throws -> Int
    /// Gives the jobs of workers whose heartbeat lapsed back to the queue; returns how many.
    func requeueOrphans() throws -> Int
}
