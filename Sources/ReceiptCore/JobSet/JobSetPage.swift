import Foundation

/// One page of a job set listing.
public struct JobSetPage: Sendable, Equatable {
    /// The entries of this page, in the set's listing order.
    public var entries: [JobSetEntry]
    /// How many entries match the filter in the whole set.
    public var totalMatching: Int
    /// The offset this page starts at, among the matching entries.
    public var offset: Int
    /// The page size asked for.
    public var limit: Int
    /// False when the store examined only part of a very large set for a filtered page, so
    /// `totalMatching` counts the matches among the members it examined (show it as "at least").
    public var totalIsExact: Bool

    /// Creates a page.
    /// - Parameters:
    ///   - entries: the entries.
    ///   - totalMatching: how many match in all.
    ///   - offset: where the page starts.
    ///   - limit: the page size.
    ///   - totalIsExact: whether the whole set was examined; default true.
    public init(entries: [JobSetEntry], totalMatching: Int, offset: Int, limit: Int, totalIsExact: Bool = true) {
        self.entries = entries
        self.totalMatching = totalMatching
        self.offset = offset
        self.limit = limit
        self.totalIsExact = totalIsExact
    }

    /// The offset of the next page, or nil on the last page.
    public var nextOffset: Int? { limit > 0 && offset + limit < totalMatching ? offset + limit : nil }
    /// The offset of the previous page, or nil on the first page.
    public var previousOffset: Int? { offset > 0 ? max(0, offset - limit) : nil }
}
