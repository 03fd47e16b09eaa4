import Foundation

/// An erasure request carried out: the database first (the rows, the audit line, the event, in one
/// transaction), then the queues (the jobs that would write the customer back). The admin API, the
/// dashboard and `receiptq customers erase` all go through it.
public struct CustomerEraser: Sendable {
    private let database: any CustomerErasure
    private let jobs: any CustomerJobPurge

    /// Creates the eraser over the database's and the queues' sides.
    public init(database: any CustomerErasure, jobs: any CustomerJobPurge) {
        self.database = database
        self.jobs = jobs
    }

    /// The audit line of an erasure: it names the app and the erasure's id, never the user (the
    /// line outlives the data; the `customer.erased` event ties the id to the user for the backend).
    public static func audit(_ action: AuditAction, erasureID: UUID, appID: UUID) -> AuditAction {
        var action = action.with(target: "erasure \(erasureID.canonical)")
        action.appID = appID
        action.userIdentifiers = []
        return action
    }

    /// Erases the customer `userIdentifier` of `appID` and every id merged with it.
    /// - Parameter audit: who asks (actor, role, source); the target and users are set here.
    /// - Returns: what was erased, with how many jobs were dropped, or nil when nothing in the
    ///   database held the customer (already erased, or never seen); jobs still submitted under
    ///   `userIdentifier` are dropped then too, so a repeat finishes an erasure whose queue side failed.
    public func erase(appID: UUID, userIdentifier: String, audit: AuditAction, at: Date) async throws -> (ErasedCustomer, droppedJobs: Int)? {
        let erasureID = UUID()
        guard
            let erased = try await database.erase(
                appID: appID, userIdentifier: userIdentifier, erasureID: erasureID, audit: Self.audit(audit, erasureID: erasureID, appID: appID),
                at: at)
        else {
            // Nothing left in the database; but a first erasure whose queue side failed after its
            // commit left jobs under the id, and this repeat is the operator's way to finish it.
            _ = try await jobs.dropJobs(
                of: ErasedCustomer(
                    erasureID: erasureID, appID: appID, userIdentifier: userIdentifier, userIdentifiers: [userIdentifier], receiptIDs: [],
                    eventIDs: []))
            return nil
        }
        return (erased, try await jobs.dropJobs(of: erased))
    }
}
