import Foundation

/// The Postgres side of `/client/app-transactions`: app transactions stored and read per user.
public protocol AppTransactionCatalog: Sendable {
    /// Stores `record` unless a newer one (by `signedDate`) is stored for its app, environment and
    /// user. - Returns: what is stored now (the newer one, when it was kept).
    func store(_ record: AppTransactionRecord) async throws -> AppTransactionRecord
    /// The user's app transactions, production first.
    func appTransactions(appID: UUID, userIdentifier: String) async throws -> [AppTransactionRecord]
}
