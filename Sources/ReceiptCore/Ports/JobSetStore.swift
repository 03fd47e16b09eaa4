import Foundation

/// Which job set a ``JobSetStore`` serves, and so what an entry's score means.
public enum JobSetKind: String, Sendable, Equatable, CaseIterable {
    /// The dead letters: jobs given up on; the score is when the job died.
    case dead
    /// Jobs waiting in backoff; the score is when the job runs again.
    case retry
}

/// The dead letters or the retries, as the dashboard and `receiptq dlq` manage them.
///
/// Retrying moves a job to its queue, atomically and at most once even when two operators retry
/// it at the same moment, with a fresh retry budget (see ``JobEnvelope/requeued(by:)``): jobs
/// retried by id go to the front, a bulk retry goes to the back so that it cannot starve fresh
/// jobs. A poison member cannot be retried, only deleted.
///
/// ```swift
/// let dead: any JobSetStore = RedisJobSet.dead(pool: pool, keys: keys)
/// if let id = JobSetEntry.ID(idFromURL), let entry = try await dead.entry(id: id) {
///     try await dead.retry(ids: [entry.id])
/// }
/// ```
public protocol JobSetStore: Sendable {
    /// Which set this is, and so what an entry's score means.
    var kind: JobSetKind { get }

    /// How many members the set holds.
    func count() async throws -> Int

    /// A page of the entries matching `filter`, in the set's listing order.
    /// - Parameters:
    ///   - filter: which entries.
    ///   - offset: how many matching entries to skip.
    ///   - limit: the most entries to return.
    /// - Returns: the page, with the number of matching entries.
    func list(filter: JobSetFilter, offset: Int, limit: Int) async throws -> JobSetPage

    /// The entry with this id (the newest one, should a job be in the set twice), or nil.
    func entry(id: JobSetEntry.ID) async throws -> JobSetEntry?

    /// Moves these jobs to the front of their queues (taken next: someone is waiting for them),
    /// with a fresh retry budget.
    /// - Parameter ids: the entries; unknown ids and poison members are skipped.
    /// - Returns: how many jobs were requeued.
    @discardableResult
    func retry(ids: [JobSetEntry.ID]) async throws -> Int

    /// Moves every job matching `filter` to the back of its queue, behind the jobs already
    /// queued (thousands of old jobs must not hold up fresh ones), with a fresh retry budget.
    /// - Parameter filter: which entries; poison members are skipped.
    /// - Returns: how many jobs were requeued.
    @discardableResult
    func retryAll(matching filter: JobSetFilter) async throws -> Int

    /// Removes these entries for good.
    /// - Parameter ids: the entries; unknown ids are skipped.
    /// - Returns: how many members were removed.
    @discardableResult
    func delete(ids: [JobSetEntry.ID]) async throws -> Int

    /// Removes every entry matching `filter` for good.
    /// - Parameter filter: which entries.
    /// - Returns: how many members were removed.
    @discardableResult
    func deleteAll(matching filter: JobSetFilter) async throws -> Int
}
