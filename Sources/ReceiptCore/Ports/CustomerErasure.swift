import Foundation

/// Erases one customer of one app from the database, for an erasure request (issue 44): their rows
/// deleted, or anonymised where the ledger needs the amounts (``ErasedCustomer``).
public protocol CustomerErasure: Sendable {
    /// Erases the customer `userIdentifier` of `appID` (with every id merged with it) in one
    /// transaction, with `audit`'s line (it must not name the user) and the `customer.erased` event.
    /// - Returns: what was erased, or nil when nothing held the customer (already erased, or never
    ///   seen): nothing was written.
    func erase(appID: UUID, userIdentifier: String, erasureID: UUID, audit: AuditAction, at: Date) async throws -> ErasedCustomer?
}
