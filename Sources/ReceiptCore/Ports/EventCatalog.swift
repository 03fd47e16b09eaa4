import Foundation

/// One page of an app's events, oldest first.
public struct EventPage: Sendable, Equatable {
    public var events: [ChangeEvent]
    /// Whether more events follow the last one now (ask again with `after` = its id).
    public var hasMore: Bool

    /// Creates a page.
    public init(events: [ChangeEvent], hasMore: Bool) {
        self.events = events
        self.hasMore = hasMore
    }
}

/// Which events a page lists.
public struct EventQuery: Sendable, Equatable {
    /// The last event the reader has (exclusive); nil: from the first.
    public var after: UUID?
    public var limit: Int
    /// Only these types (nil: all).
    public var types: [EventType]?
    public var userIdentifier: String?

    /// Creates a query.
    public init(after: UUID? = nil, limit: Int = 100, types: [EventType]? = nil, userIdentifier: String? = nil) {
        self.after = after
        self.limit = limit
        self.types = types
        self.userIdentifier = userIdentifier
    }
}

/// The read side of the events API.
///
/// The order is stable and complete: a reader that pages with `after` sees every event once,
/// including events whose transactions were still committing while it read (they are listed only
/// once nothing older can still appear).
public protocol EventCatalog: Sendable {
    /// A page of `appID`'s events; nil when `query.after` names no event of the app.
    func events(appID: UUID, query: EventQuery) async throws -> EventPage?
}
