import Foundation

/// Durable storage of validation results (blocking, like `JobQueue`; one instance per thread).
public protocol ReceiptStore: AnyObject {
    /// The app a job belongs to.
    func app(id: UUID) throws -> AppRecord?
    /// Where the histories of `keys` (customers of apps) were last read up to, in one read; a key
    /// whose history never was (a first sight) is absent.
    func historyCursors(_ keys: Set<HistoryKey>) throws -> [HistoryKey: HistoryCursor]
    /// Stores results in one transaction where it can (group commit), idempotently (replaying the
    /// same job changes nothing), and returns each receipt resource as the API shows it, in order
    /// (nil for a `repoll` job, which updates subscriptions rather than a receipt of its own).
    /// - Returns: one result per record: a record the database refuses (say, its app was deleted)
    ///   fails alone, without failing the others.
    /// - Throws: when the database is unreachable: nothing of the batch is known to be stored.
    func save(_ records: [ValidationRecord]) throws -> [Result<ReceiptResource?, StoreFailure>]
}
