import Foundation

/// Drops an erased customer's jobs from the queues, wherever a job can sit: queued, held by a
/// worker, waiting in backoff, dead.
public protocol CustomerJobPurge: Sendable {
    /// Removes every job ``ErasedCustomer/holds(_:)`` selects, with the keys that belong to those
    /// jobs alone.
    /// - Returns: how many jobs were dropped.
    func dropJobs(of customer: ErasedCustomer) async throws -> Int
}
