import Foundation

/// The Redis side of the re-poll scheduler: a budget shared by every replica, and a queue that
/// takes each poll once.
public protocol RepollQueue: AnyObject {
    /// Takes up to `wanted` re-polls from the global rate budget at `now`; returns how many it may queue.
    func acquire(_ wanted: Int, now: Date) throws -> Int
    /// Queues each job unless a job for the same subscription and poll counter was queued before
    /// (a scheduler that died before its commit is repeated harmlessly); returns how many were new.
    func enqueue(_ jobs: [JobEnvelope]) throws -> Int
}
