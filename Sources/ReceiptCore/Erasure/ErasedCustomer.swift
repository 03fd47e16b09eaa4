import Foundation

/// One customer's erasure, as the database carried it out: what the queues must then forget.
///
/// An erasure covers the merged customer: every id of `userIdentifiers` (the id asked for, its
/// canonical id and the canonical's aliases). The receipts and events are those the database
/// erased, for the jobs that name them rather than the user (a re-poll names its receipt, a
/// webhook delivery its event).
public struct ErasedCustomer: Sendable, Equatable {
    /// The erasure's id: the audit line and the `customer.erased` event name it, never the user.
    public var erasureID: UUID
    /// The app.
    public var appID: UUID
    /// The id the operator asked to erase.
    public var userIdentifier: String
    /// Every id merged with it, itself included.
    public var userIdentifiers: Set<String>
    /// The customer's receipts (their rows were anonymised, their ids kept for the ledger).
    public var receiptIDs: Set<UUID>
    /// The customer's events (deleted, with their webhook deliveries).
    public var eventIDs: Set<UUID>

    /// Creates the account of an erasure.
    public init(
        erasureID: UUID, appID: UUID, userIdentifier: String, userIdentifiers: Set<String>, receiptIDs: Set<UUID>, eventIDs: Set<UUID>
    ) {
        self.erasureID = erasureID
        self.appID = appID
        self.userIdentifier = userIdentifier
        self.userIdentifiers = userIdentifiers
        self.receiptIDs = receiptIDs
        self.eventIDs = eventIDs
    }

    /// Whether `envelope` is a job of this customer: one of the app's jobs submitted for one of the
    /// customer's ids, or naming one of their receipts (the job's own id is its receipt's) or events.
    public func holds(_ envelope: JobEnvelope) -> Bool {
        guard envelope.header.appID == appID else { return false }
        if receiptIDs.contains(envelope.header.id) { return true }
        switch envelope.payload {
        case .receipt, .transaction, .importItem:
            return envelope.payload.purchase?.submission.userIdentifier.map(userIdentifiers.contains) ?? false
        case .repoll(let job):
            return receiptIDs.contains(job.target.receiptID) || (job.userIdentifier.map(userIdentifiers.contains) ?? false)
        case .delivery(let delivery): return eventIDs.contains(delivery.target.eventID)
        // Apple's notifications and the consumption answers name a transaction, never a user.
        case .notification, .consumption: return false
        }
    }
}
