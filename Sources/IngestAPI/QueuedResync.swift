import Foundation
import ReceiptCore

/// ``HistoryResync`` on the ingestion's queue: a resync is a bare-id StoreKit 2 job of origin
/// `resync`, queued like any other purchase (one queue, one engine), which the worker's planner
/// answers with the customer's whole history.
public struct QueuedResync: HistoryResync {
    let intake: any ReceiptIntake
    let app: @Sendable (UUID) async throws -> AppRecord?
    let now: @Sendable () -> Date

    /// Creates the resync.
    /// - Parameters:
    ///   - intake: the queue.
    ///   - app: looks an app up by id.
    ///   - now: the injected clock.
    public init(
        intake: any ReceiptIntake, app: @escaping @Sendable (UUID) async throws -> AppRecord?,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.intake = intake
        self.app = app
        self.now = now
    }

    public func resync(_ request: ResyncRequest) async throws(ResyncFailure) -> UUID {
        let record: AppRecord?
        do {
            record = try await app(request.appID)
        } catch {
            throw .unavailable
        }
        guard let record else { throw .unknownApp }
        guard record.serverAPIKeyID != nil else { throw .noServerAPIKey }
        let at = now()
        let envelope = JobEnvelope(
            id: JobID.make(at: at), appID: record.id, enqueuedAt: at, origin: .resync,
            payload: .transaction(
                TransactionJob(
                    signedTransaction: nil, transactionID: request.originalTransactionID, bundleID: record.bundleID,
                    environment: request.environment?.rawValue, submission: Submission(userIdentifier: request.userIdentifier))))
        do {
            // Every resync is the operator's deliberate act: keyed by its own id, never a duplicate.
            _ = try await intake.enqueue(
                envelope, pending: ReceiptResource.pending(envelope, purchases: []), idempotencyKey: "resync\u{0}\(envelope.id.canonical)",
                wait: .zero)
        } catch {
            throw .unavailable
        }
        return envelope.id
    }
}
