import Foundation

/// Everything receiptq holds about one customer of one app, for an access request: written as one
/// JSON document, piece by piece (a customer's records can be many), from one snapshot.
public protocol CustomerDataExport: Sendable {
    /// Writes the document of the customer `userIdentifier` of `appID` (with every user id merged
    /// with it) to `write`, in order; the pieces together are one JSON object.
    func export(appID: UUID, userIdentifier: String, at now: Date, write: (String) async throws -> Void) async throws
}
