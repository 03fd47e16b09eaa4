import Foundation

/// One page of Apple's Get Notification History.
public struct NotificationHistoryPage: Sendable, Equatable {
    /// The notifications' `signedPayload`s, oldest first.
    public var signedPayloads: [String]
    /// Where the next page starts (with the same dates), when `hasMore`.
    public var paginationToken: String?
    public var hasMore: Bool

    /// Creates a page.
    public init(signedPayloads: [String], paginationToken: String?, hasMore: Bool) {
        self.signedPayloads = signedPayloads
        self.paginationToken = paginationToken
        self.hasMore = hasMore
    }
}

/// Apple's Get Notification History (the App Store Server API, with the app's key).
public protocol NotificationHistorySource: Sendable {
    /// The notifications Apple signed for `app` in `environment` from `start` until `end`.
    /// - Throws: when Apple (or the network) did not answer with a page.
    func page(
        app: AppRecord, environment: AppStoreEnvironment, start: Date, end: Date, paginationToken: String?
    ) async throws -> NotificationHistoryPage
}

/// Where an app's history sweep stands in one environment: the window asked for, and the page
/// reached in it (nil: the window is done, or not begun).
public struct NotificationHistoryCursor: Sendable, Equatable {
    public var start: Date
    public var end: Date
    public var paginationToken: String?

    /// Creates a cursor.
    public init(start: Date, end: Date, paginationToken: String?) {
        self.start = start
        self.end = end
        self.paginationToken = paginationToken
    }
}

/// The apps whose notifications are recovered from Apple's history, and their cursors (Postgres).
public protocol NotificationHistoryCursors: Sendable {
    /// Apps with a notification URL and an In-App Purchase key (decrypted: the sweep signs JWTs).
    func sweptApps() async throws -> [AppRecord]
    func cursor(appID: UUID, environment: AppStoreEnvironment) async throws -> NotificationHistoryCursor?
    func save(_ cursor: NotificationHistoryCursor, appID: UUID, environment: AppStoreEnvironment) async throws
    /// How many apps had their notification URL issued before `since` and have stored no
    /// notification since (all apps, with a key or not).
    func silentApps(since: Date) async throws -> Int
}
