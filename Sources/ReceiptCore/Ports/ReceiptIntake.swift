import Foundation

/// How an enqueue ended.
public enum IntakeResult: Sendable, Equatable {
    /// Queued, and the worker's resource arrived within the wait.
    case answered(ReceiptResource)
    /// Durably queued; the worker has not stored it within the wait (or said it will retry).
    case queued
    /// The same receipt of the same app was queued within the idempotency window, under this id:
    /// nothing new was queued.
    case duplicate(UUID)
}

/// The Redis side of the ingestion API (async: it runs in Hummingbird's handlers).
public protocol ReceiptIntake: Sendable {
    /// Stores the pending resource (if any: a notification has none to show) and queues the job
    /// durably, unless `idempotencyKey` was queued within the window; returns only once Redis has
    /// both, after waiting up to `wait` for the worker's answer.
    /// - Throws: when Redis did not take the job (nothing is stored: the client may retry).
    func enqueue(
        _ envelope: JobEnvelope, pending: ReceiptResource?, idempotencyKey: String, wait: Duration
    ) async throws
        -> IntakeResult
    /// The pending resource of a job not yet stored in Postgres.
    func pendingResource(id: UUID) async throws -> ReceiptResource?
    /// Whether Redis answers (readiness).
    func ping() async -> Bool
    /// Adds one answered batch of the import `id` to its progress (``ImportRun``), best effort:
    /// progress is a view, so a failure here never fails the batch whose jobs Redis already has.
    func recordImport(_ id: UUID, appID: UUID, tally: ImportBatchTally, at: Date) async
}
