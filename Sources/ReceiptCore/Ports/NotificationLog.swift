import Foundation

/// One stored App Store Server Notification, as operators list it.
public struct NotificationSummary: Sendable, Equatable {
    public var id: UUID
    public var appID: UUID
    /// Apple's `notificationUUID` (V1: `v1-` and the body's digest).
    public var uuid: String
    public var version: NotificationVersion
    public var type: String
    public var subtype: String?
    public var environment: String?
    public var signedAt: Date
    public var receivedAt: Date
    public var outcome: NotificationOutcome
    public var originalTransactionID: String?
    public var transactionID: String?
    public var productID: String?

    /// Creates a summary.
    public init(
        id: UUID, appID: UUID, uuid: String, version: NotificationVersion, type: String, subtype: String?, environment: String?,
        signedAt: Date, receivedAt: Date, outcome: NotificationOutcome, originalTransactionID: String?, transactionID: String?,
        productID: String?
    ) {
        self.id = id
        self.appID = appID
        self.uuid = uuid
        self.version = version
        self.type = type
        self.subtype = subtype
        self.environment = environment
        self.signedAt = signedAt
        self.receivedAt = receivedAt
        self.outcome = outcome
        self.originalTransactionID = originalTransactionID
        self.transactionID = transactionID
        self.productID = productID
    }
}

/// Which notifications to list (nil: any).
public struct NotificationFilter: Sendable, Equatable {
    public var type: String?
    public var appID: UUID?

    /// Creates a filter.
    public init(type: String? = nil, appID: UUID? = nil) {
        self.type = type
        self.appID = appID
    }
}

/// How many notifications of one type ended one way.
public struct NotificationCount: Sendable, Equatable {
    public var type: String
    public var outcome: NotificationOutcome
    public var count: Int

    /// Creates a count.
    public init(type: String, outcome: NotificationOutcome, count: Int) {
        self.type = type
        self.outcome = outcome
        self.count = count
    }
}

/// The stored notifications, for the dashboard (Postgres; async, read-only).
public protocol NotificationLog: Sendable {
    /// Newest first, `limit` from `offset`; the entries and whether more follow.
    func list(filter: NotificationFilter, offset: Int, limit: Int) async throws -> (entries: [NotificationSummary], hasMore: Bool)
    /// One notification and what operators see of its payload (nested JWS decoded, receipt data truncated).
    func notification(id: UUID) async throws -> (summary: NotificationSummary, payload: JSONValue)?
    /// Counts by type and outcome of the notifications received since `since`.
    func counts(since: Date) async throws -> [NotificationCount]
}
