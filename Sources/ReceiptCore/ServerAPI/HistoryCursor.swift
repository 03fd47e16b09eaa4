import Foundation

/// How far a customer's transaction history (one original transaction of an app) was read: the
/// `revision` Apple gave with the last page of Get Transaction History. The next read starts
/// there, so only transactions Apple added since are fetched and verified (issue 42, item 2).
public struct HistoryCursor: Sendable, Equatable {
    /// The customer: the original transaction every history page belongs to.
    public var originalTransactionID: String
    /// The environment the revision is Apple's answer in (a revision means nothing in the other).
    public var environment: AppStoreEnvironment
    /// Apple's opaque token for where the last page ended.
    public var revision: String

    /// Creates a cursor.
    public init(originalTransactionID: String, environment: AppStoreEnvironment, revision: String) {
        self.originalTransactionID = originalTransactionID
        self.environment = environment
        self.revision = revision
    }
}

/// Which customer's history a cursor is for: an app and one of its original transactions.
public struct HistoryKey: Sendable, Hashable {
    public var appID: UUID
    public var originalTransactionID: String

    /// Creates a key.
    public init(appID: UUID, originalTransactionID: String) {
        self.appID = appID
        self.originalTransactionID = originalTransactionID
    }
}
